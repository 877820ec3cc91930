#!lua
-- Remove a finalized transaction's records after the retention window.
-- The per-segment aborted-writer sets are NOT touched (H2): they outlive the header
-- so that "no header" can safely mean "committed" for entries still retained.
-- KEYS[1] header  KEYS[2] write records  KEYS[3] ack records  KEYS[4] finalized index
-- KEYS[5] owner index
-- ARGV[1] seq  ARGV[2] cutoff ms (finalized at or before)
-- returns {'OK'} | {'GONE'} | {'OPEN'} | {'UNMATERIALIZED'} | {'YOUNG'} | {'ACKS_PENDING'}
local h = redis.call('HMGET', KEYS[1], 'st', 'fin', 'ao', 'own', 'mat')
if not h[1] then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {'GONE'}
end
if h[1] == 'OPEN' then return {'OPEN'} end
-- the aborted-writer sets must be written before the header may go (H2)
if h[5] ~= '1' then return {'UNMATERIALIZED'} end
if tonumber(h[2]) > tonumber(ARGV[2]) then return {'YOUNG'} end
if h[1] == 'COMMITTED' and tonumber(h[3] or '0') > 0 then return {'ACKS_PENDING'} end
if h[4] and h[4] ~= '' and redis.call('HGET', KEYS[5], h[4]) == ARGV[1] then
  redis.call('HDEL', KEYS[5], h[4])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
return {'OK'}
