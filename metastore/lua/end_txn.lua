#!lua
-- End a transaction: the single compare-and-set OPEN -> COMMITTED | ABORTED.
-- Validates everything before the first write (Lua has no rollback).
-- KEYS[1] header  KEYS[2] write records  KEYS[3] deadline index  KEYS[4] finalized index
-- KEYS[5] event stream  then per segment i: KEYS[5+2i-1] open-write index, KEYS[5+2i] aborted set
-- ARGV[1] seq  ARGV[2] target state  ARGV[3] expected registration count (wv)
-- ARGV[4] winners: '*' (every writer with a recorded position) or a JSON array of writer ids
-- ARGV[5] stream maxlen  ARGV[6] n segments  ARGV[7..6+n] segment names
-- returns {'OK', state, timed_out 0|1, winners_json} | {'ALREADY', state, '0', winners_json}
--       | {'CONFLICT', state} | {'NOTFOUND'} | {'RETRY', wv}
local h = redis.call('HMGET', KEYS[1], 'st', 'dl', 'wv', 'win')
if not h[1] then return {'NOTFOUND'} end
local target = ARGV[2]
if h[1] == target then return {'ALREADY', h[1], '0', h[4] or '[]'} end
if h[1] ~= 'OPEN' then return {'CONFLICT', h[1]} end
if h[3] ~= ARGV[3] then return {'RETRY', h[3]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local timed_out = 0
if target == 'COMMITTED' and now > tonumber(h[2]) then
  target = 'ABORTED'
  timed_out = 1
end
local n = tonumber(ARGV[6])
local seg_slot = {}
for i = 1, n do seg_slot[ARGV[6 + i]] = i end
local named = nil
if ARGV[4] ~= '*' then
  named = {}
  for _, w in ipairs(cjson.decode(ARGV[4])) do named[w] = true end
end
local recs = redis.call('HGETALL', KEYS[2])
local plan = {}
for j = 1, #recs, 2 do
  local field, value = recs[j], recs[j + 1]
  local bar = string.find(field, '|[^|]*$')
  local seg, writer = string.sub(field, 1, bar - 1), string.sub(field, bar + 1)
  local i = seg_slot[seg]
  if not i then return {'RETRY', h[3]} end
  local first = string.sub(value, 1, string.find(value, ',', 1, true) - 1)
  local wins = false
  if target == 'COMMITTED' then
    if named then wins = named[writer] == true else wins = first ~= '' end
  end
  plan[#plan + 1] = {i, writer, first, wins}
end
local winners, seen = {}, {}
for _, p in ipairs(plan) do
  local i, writer, first, wins = p[1], p[2], p[3], p[4]
  local ow, ab = KEYS[5 + 2 * i - 1], KEYS[5 + 2 * i]
  redis.call('ZREM', ow, '!|' .. ARGV[1] .. '|' .. writer)
  if first ~= '' then redis.call('ZREM', ow, first .. '|' .. ARGV[1] .. '|' .. writer) end
  if wins then
    if not seen[writer] then seen[writer] = true; winners[#winners + 1] = writer end
  else
    redis.call('SADD', ab, ARGV[1] .. '|' .. writer)
  end
end
local win_json = '[]'
if #winners > 0 then win_json = cjson.encode(winners) end
redis.call('HSET', KEYS[1], 'st', target, 'fin', now, 'win', win_json)
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
local segs = {}
for i = 1, n do segs[i] = ARGV[6 + i] end
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[5], '*', 'k', 'end', 't', ARGV[1],
  's', target, 'g', table.concat(segs, '\n'))
return {'OK', target, tostring(timed_out), win_json}
