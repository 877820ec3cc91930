#!lua
-- Record acks under an OPEN transaction (after their PENDING_ACK claim succeeded).
-- The header check makes this the fence: after the end CAS no ack can join.
-- KEYS[1] header   KEYS[2] ack records
-- ARGV[1] field 'segment|subscription'   ARGV[2] 'ind' | 'cum'   ARGV[3..] positions
-- returns {'OK'} | {'NOTFOUND'} | {'NOTOPEN', state} | {'TIMEDOUT'}
local h = redis.call('HMGET', KEYS[1], 'st', 'dl')
if not h[1] then return {'NOTFOUND'} end
if h[1] ~= 'OPEN' then return {'NOTOPEN', h[1]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(h[2]) then return {'TIMEDOUT'} end
-- validated before the first write (Lua has no rollback): a refused record must not
-- leave the header's open-ack count raised, which would hold its collection forever
if #ARGV < 3 then return redis.error_reply('record_acks: no position to record') end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
local rec
if cur then
  rec = cjson.decode(cur)
else
  rec = {ind = {}, cum = '', applied = false}
  redis.call('HINCRBY', KEYS[1], 'ao', 1)
end
if ARGV[2] == 'cum' then
  if ARGV[3] > rec.cum then rec.cum = ARGV[3] end
else
  local have = {}
  for _, p in ipairs(rec.ind) do have[p] = true end
  for i = 3, #ARGV do
    if not have[ARGV[i]] then rec.ind[#rec.ind + 1] = ARGV[i]; have[ARGV[i]] = true end
  end
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(rec))
-- every call counts: a commit checks that none its process made was lost (end_txn)
redis.call('HINCRBY', KEYS[1], 'an', 1)
return {'OK'}
