#!lua
-- Remove a finalized transaction's records after the retention window.
-- The per-segment aborted-writer sets are NOT touched (H2): they outlive the header
-- so that "no header" can safely mean "committed" for entries still retained.
-- Each collection leaves a durable trace (fail closed, DESIGN §3): the id joins the
-- collected set, and the watermark below which every id is collected or can never be
-- created moves up to the oldest live id. A reader takes a missing header for
-- "collected" only for an id so recorded; any other missing header is unknown.
-- KEYS[1] header  KEYS[2] write records  KEYS[3] ack records  KEYS[4] finalized index
-- KEYS[5] owner index  KEYS[6] live ids  KEYS[7] collected ids above the watermark
-- KEYS[8] gc hash (w = watermark, run)  KEYS[9] gaps of unknown ids  KEYS[10] seq counter
-- ARGV[1] seq  ARGV[2] cutoff ms (finalized at or before)
-- ARGV[3] '1': collect only a decision marked fsynced (durability=waitaof: a collected id
--         is delivered unless listed aborted, so its decision must not be losable)
-- A txn whose id lies in a gap lived across a server change: its write records may be
-- lost, so its aborted/losing writers may be unlisted. Its header is kept (KEPT, off the
-- indexes): for it the header stays the truth, however late an entry is read.
-- returns {'OK'} | {'KEPT'} | {'GONE'} | {'OPEN'} | {'UNMATERIALIZED'} | {'YOUNG'}
--       | {'ACKS_PENDING'} | {'UNFSYNCED'}
--#include epoch
local epoch_err = check_epoch(KEYS[10], KEYS[8], KEYS[9])
if epoch_err then return epoch_err end
local h = redis.call('HMGET', KEYS[1], 'st', 'fin', 'ao', 'own', 'mat', 'fs')
if not h[1] then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {'GONE'}
end
if h[1] == 'OPEN' then return {'OPEN'} end
-- the aborted-writer sets must be written before the header may go (H2)
if h[5] ~= '1' then return {'UNMATERIALIZED'} end
if tonumber(h[2]) > tonumber(ARGV[2]) then return {'YOUNG'} end
if h[1] == 'COMMITTED' and tonumber(h[3] or '0') > 0 then return {'ACKS_PENDING'} end
if ARGV[3] == '1' and h[6] ~= '1' then return {'UNFSYNCED'} end
if h[4] and h[4] ~= '' and redis.call('HGET', KEYS[5], h[4]) == ARGV[1] then
  redis.call('HDEL', KEYS[5], h[4])
end
local seq = tonumber(ARGV[1])
local gap = redis.call('ZREVRANGEBYSCORE', KEYS[9], seq, '-inf', 'LIMIT', 0, 1)[1]
local kept = gap and tonumber(string.sub(gap, string.find(gap, ':', 1, true) + 1)) >= seq
if kept then
  redis.call('HSET', KEYS[1], 'kept', 1)
  redis.call('DEL', KEYS[2], KEYS[3])
else
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
local w = tonumber(redis.call('HGET', KEYS[8], 'w') or '0')
if seq > w and not kept then redis.call('ZADD', KEYS[7], seq, ARGV[1]) end
-- every id below the oldest live one is collected, never created (and refused from now
-- on) or in a gap; with none live, every id handed out so far
local oldest = redis.call('ZRANGE', KEYS[6], 0, 0)[1]
local nw = oldest and (tonumber(oldest) - 1) or tonumber(redis.call('GET', KEYS[10]) or '0')
if nw > w then
  redis.call('HSET', KEYS[8], 'w', string.format('%d', nw))
  -- the collected set keeps only what the watermark does not say: ids inside gaps
  local from = '-inf'
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', nw)) do
    local bar = string.find(g, ':', 1, true)
    redis.call('ZREMRANGEBYSCORE', KEYS[7], from, '(' .. string.sub(g, 1, bar - 1))
    from = '(' .. string.sub(g, bar + 1)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[7], from, nw)
end
if kept then return {'KEPT'} end
return {'OK'}
