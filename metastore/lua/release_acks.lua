#!lua
-- Release PENDING_ACK claims held by one transaction (after it ended, or to steal
-- claims of an aborted/collected holder). Claims of other holders are untouched.
-- KEYS[1] claim table   ARGV[1] holder txn id   ARGV[2..] positions ('~cum' allowed;
-- none = every claim of the holder)
-- returns the number of claims released
local holder, n = ARGV[1], 0
local function release(field, value)
  if not value then return end
  if field == '~cum' then value = string.sub(value, 1, string.find(value, '|', 1, true) - 1) end
  if value == holder then
    redis.call('HDEL', KEYS[1], field)
    n = n + 1
  end
end
if #ARGV == 1 then
  local all = redis.call('HGETALL', KEYS[1])
  for j = 1, #all, 2 do release(all[j], all[j + 1]) end
else
  for i = 2, #ARGV do release(ARGV[i], redis.call('HGET', KEYS[1], ARGV[i])) end
end
return n
