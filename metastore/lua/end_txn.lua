#!lua
-- End a transaction: the single compare-and-set OPEN -> COMMITTED | ABORTED. O(1):
-- the per-segment indexes are cleaned afterwards by materialize_txn (idempotent).
-- KEYS[1] header  KEYS[2] write records  KEYS[3] deadline index  KEYS[4] finalized index
-- KEYS[5] unmaterialized index  KEYS[6] event stream
-- KEYS[7] counters (hash: committed, aborted, timed_out; kept here, in the CAS, so
--         they are exact whatever process ends the txn)
-- ARGV[1] seq  ARGV[2] target state
-- ARGV[3] winners: JSON array of writer ids, or '*' = every writer with a recorded position
--         (scans the write records: only for callers that do not know their writers)
-- ARGV[4] stream maxlen
-- ARGV[5] ARGV[6] write registrations and ack record calls the committing process made
--         (a commit finding fewer aborts instead: the store lost records, e.g. it came
--         back from an earlier copy; '0' '0' checks nothing)
-- Optional, for a Spark sink's batch (its progress advances in the same step as the
-- decision, so a replay is recognised however late it comes, invariant 5):
-- KEYS[8] the sink's progress hash (same slot)   ARGV[7] batchId   ARGV[8] query id
-- returns {'OK', state, 0|1 (timed out)|2 (records lost), header fields...}
--       | {'ALREADY', state, '0', fields...}
--       | {'CONFLICT', state} | {'NOTFOUND'} | {'FENCED', query id the sink is bound to}
local h = redis.call('HMGET', KEYS[1], 'st', 'dl', 'wv', 'an')
if not h[1] then return {'NOTFOUND'} end
local target = ARGV[2]
local function advance_sink()
  if KEYS[8] == nil then return end
  local cur = tonumber(redis.call('HGET', KEYS[8], 'batch') or '-1')
  if tonumber(ARGV[7]) > cur then
    redis.call('HSET', KEYS[8], 'batch', ARGV[7], 'txn', ARGV[1], 'qid', ARGV[8])
  end
end
if KEYS[8] ~= nil and target == 'COMMITTED' then
  local bound = redis.call('HGET', KEYS[8], 'qid')
  if bound and bound ~= ARGV[8] then return {'FENCED', bound} end
end
if h[1] == target then
  if target == 'COMMITTED' then advance_sink() end
  return {'ALREADY', h[1], '0', unpack(redis.call('HGETALL', KEYS[1]))}
end
if h[1] ~= 'OPEN' then return {'CONFLICT', h[1]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local timed_out = 0
if target == 'COMMITTED' and now > tonumber(h[2]) then
  target = 'ABORTED'
  timed_out = 1
elseif target == 'COMMITTED' and (tonumber(h[3] or '0') < tonumber(ARGV[5])
                                  or tonumber(h[4] or '0') < tonumber(ARGV[6])) then
  target = 'ABORTED'
  timed_out = 2
end
local win_json = '[]'
if target == 'COMMITTED' then
  if ARGV[3] == '*' then
    local winners, seen = {}, {}
    local recs = redis.call('HGETALL', KEYS[2])
    for j = 1, #recs, 2 do
      local writer = string.sub(recs[j], string.find(recs[j], '|[^|]*$') + 1)
      if string.sub(recs[j + 1], 1, 1) ~= ',' and not seen[writer] then
        seen[writer] = true
        winners[#winners + 1] = writer
      end
    end
    if #winners > 0 then win_json = cjson.encode(winners) end
  else
    win_json = ARGV[3]
  end
end
redis.call('HSET', KEYS[1], 'st', target, 'fin', now, 'win', win_json, 'mat', 0)
if target == 'COMMITTED' then advance_sink() end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('ZADD', KEYS[5], now, ARGV[1])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[4], '*', 'k', 'end', 't', ARGV[1], 's', target)
redis.call('HINCRBY', KEYS[7], target == 'COMMITTED' and 'committed' or 'aborted', 1)
if target == 'ABORTED' and now > tonumber(h[2]) then redis.call('HINCRBY', KEYS[7], 'timed_out', 1) end
return {'OK', target, tostring(timed_out), unpack(redis.call('HGETALL', KEYS[1]))}
