#!lua
-- Drop tombstones that can no longer matter: the caller checked that each message
-- can no longer be delivered (at or below '~tomb', or behind the subscription's
-- cursor) and that its holder's ack record is marked applied (a tombstone is the
-- holder's trace until then). Live claims are never touched.
-- KEYS[1] claim table   ARGV[1..] 'position|holder' (the tombstone seen by the caller)
-- returns the number of tombstones dropped
local n = 0
for i = 1, #ARGV do
  local bar = string.find(ARGV[i], '|', 1, true)
  local pos, holder = string.sub(ARGV[i], 1, bar - 1), string.sub(ARGV[i], bar + 1)
  if redis.call('HGET', KEYS[1], pos) == '=' .. holder then
    redis.call('HDEL', KEYS[1], pos)
    n = n + 1
  end
end
return n
