#!lua
-- Create a transaction header in state OPEN (idempotent per owner).
-- An id at or below the collected watermark, or in a gap of unknown ids, is refused
-- (STALE): readers take a missing header there for "collected" or "lost", so no
-- header may appear there later (the caller allocates a fresh id). So is an id the
-- server's clock has not reached (_epoch.lua: no id is used before its time).
-- KEYS[1] header   KEYS[2] deadline index   KEYS[3] owner index   KEYS[4] sequence counter
-- KEYS[5] live ids   KEYS[6] gc hash (watermark, run id)   KEYS[7] gaps of unknown ids
-- KEYS[8] counters (hash: opened)
-- ARGV[1] seq   ARGV[2] timeout ms   ARGV[3] owner ('' = none)
-- ARGV[4] seq of an ABORTED txn the owner may be moved off ('' = none)
-- returns {'OK', seq, deadline_ms, created_ms} | {'OWNED', existing_seq} | {'DUP'} | {'STALE'}
--#include epoch
local epoch_err = check_epoch(KEYS[4], KEYS[6], KEYS[7])
if epoch_err then return epoch_err end
local seq, timeout, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if owner ~= '' then
  local existing = redis.call('HGET', KEYS[3], owner)
  if existing and existing ~= ARGV[4] then return {'OWNED', existing} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'DUP'} end
if tonumber(seq) <= tonumber(redis.call('HGET', KEYS[6], 'w') or '0') then return {'STALE'} end
local gap = redis.call('ZREVRANGEBYSCORE', KEYS[7], seq, '-inf', 'LIMIT', 0, 1)[1]
if gap and tonumber(string.sub(gap, string.find(gap, ':', 1, true) + 1)) >= tonumber(seq) then
  return {'STALE'}
end
if tonumber(seq) > now_us() then return {'STALE'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + timeout
redis.call('HSET', KEYS[1], 'st', 'OPEN', 'dl', deadline, 'cr', now, 'own', owner,
  'tmo', timeout, 'wv', 0, 'ao', 0, 'v', 1)
redis.call('ZADD', KEYS[2], deadline, seq)
if owner ~= '' then redis.call('HSET', KEYS[3], owner, seq) end
redis.call('ZADD', KEYS[5], seq, seq)
-- keep the counter ahead of ids chosen by the caller (sequential keys)
local cur = tonumber(redis.call('GET', KEYS[4]) or '0')
if cur < tonumber(seq) then redis.call('SET', KEYS[4], seq) end
redis.call('HINCRBY', KEYS[8], 'opened', 1)
return {'OK', seq, tostring(deadline), tostring(now)}
