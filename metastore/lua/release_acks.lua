#!lua
-- Settle PENDING_ACK claims held by one transaction after it ended.
-- 'release' (aborted or void holder): the claims are deleted, the messages may be
-- claimed again. 'commit' (the acks reached the cursor): each claim becomes a
-- tombstone that conflicts with every later claim of the message (invariant 7: a
-- Shared subscription may still redeliver it); a cumulative claim raises '~tomb'.
-- Claims of other holders and existing tombstones are untouched: a tombstone is also
-- its holder's trace until its ack record is marked applied (recovery reads it).
-- KEYS[1] claim table   ARGV[1] holder txn id   ARGV[2] 'release' | 'commit'
-- ARGV[3..] positions ('~cum' allowed; none = every claim of the holder)
-- returns the number of claims settled
local holder, commit, n = ARGV[1], ARGV[2] == 'commit', 0
local new_tomb = nil
local function settle(field, value)
  if not value then return end
  local pos = nil
  if field == '~cum' then
    local bar = string.find(value, '|', 1, true)
    value, pos = string.sub(value, 1, bar - 1), string.sub(value, bar + 1)
  end
  if value ~= holder then return end
  n = n + 1
  if not commit or pos then redis.call('HDEL', KEYS[1], field) end
  if commit then
    if pos then new_tomb = pos else redis.call('HSET', KEYS[1], field, '=' .. holder) end
  end
end
if #ARGV == 2 then
  local all = redis.call('HGETALL', KEYS[1])
  for j = 1, #all, 2 do
    if all[j] ~= '~tomb' then settle(all[j], all[j + 1]) end
  end
else
  for i = 3, #ARGV do settle(ARGV[i], redis.call('HGET', KEYS[1], ARGV[i])) end
end
if new_tomb then
  local cur = redis.call('HGET', KEYS[1], '~tomb')
  local cur_pos = cur and string.sub(cur, string.find(cur, '|', 1, true) + 1) or ''
  if new_tomb > cur_pos then
    redis.call('HSET', KEYS[1], '~tomb', holder .. '|' .. new_tomb)
  end
end
return n
