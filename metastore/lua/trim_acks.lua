#!lua
-- Drop tombstones that can no longer matter. The caller checked that each holder's
-- ack record is marked applied (a tombstone is the holder's trace until then) and
-- that each message is at or below ARGV[1], the horizon: '~tomb' or the
-- subscription's cursor on the broker. A copy the broker handed out before its
-- cursor moved may still be acked, so the horizon is kept as '~trimmed' (raised
-- only) and every later claim at or below it conflicts, like '~tomb'. Live claims
-- are never touched.
-- KEYS[1] claim table   ARGV[1] horizon   ARGV[2..] 'position|holder' (as seen)
-- returns the number of tombstones dropped
local cur = redis.call('HGET', KEYS[1], '~trimmed')
if not cur or ARGV[1] > cur then redis.call('HSET', KEYS[1], '~trimmed', ARGV[1]) end
local n = 0
for i = 2, #ARGV do
  local bar = string.find(ARGV[i], '|', 1, true)
  local pos, holder = string.sub(ARGV[i], 1, bar - 1), string.sub(ARGV[i], bar + 1)
  if pos <= ARGV[1] and redis.call('HGET', KEYS[1], pos) == '=' .. holder then
    redis.call('HDEL', KEYS[1], pos)
    n = n + 1
  end
end
return n
