#!lua
-- Materialize an ended transaction on the segments it wrote: drop its entries from
-- the open-write indexes (the gate moves) and list its aborted or losing writers per
-- segment (H2: kept as long as the data). Idempotent; runs after the end CAS, by the
-- committer or by any sweeper. Validates before the first write.
-- KEYS[1] header  KEYS[2] write records  KEYS[3] unmaterialized index  KEYS[4] event stream
-- then per segment i: KEYS[4+2i-1] open-write index, KEYS[4+2i] aborted-writer set
-- ARGV[1] seq  ARGV[2] stream maxlen  ARGV[3] n segments  ARGV[4..3+n] segment names
-- returns {'OK'} | {'ALREADY'} | {'GONE'} | {'OPEN'} | {'RETRY'} (a segment was not named)
local h = redis.call('HMGET', KEYS[1], 'st', 'win', 'mat')
if not h[1] then return {'GONE'} end
if h[1] == 'OPEN' then return {'OPEN'} end
if h[3] == '1' then return {'ALREADY'} end
local n = tonumber(ARGV[3])
local slot = {}
for i = 1, n do slot[ARGV[3 + i]] = i end
local winners = {}
if h[1] == 'COMMITTED' then
  for _, w in ipairs(cjson.decode(h[2] or '[]')) do winners[w] = true end
end
local recs = redis.call('HGETALL', KEYS[2])
local plan = {}
for j = 1, #recs, 2 do
  local bar = string.find(recs[j], '|[^|]*$')
  local seg, writer = string.sub(recs[j], 1, bar - 1), string.sub(recs[j], bar + 1)
  local i = slot[seg]
  if not i then return {'RETRY'} end
  local first = string.sub(recs[j + 1], 1, string.find(recs[j + 1], ',', 1, true) - 1)
  plan[#plan + 1] = {i, writer, first}
end
for _, p in ipairs(plan) do
  local i, writer, first = p[1], p[2], p[3]
  local ow, ab = KEYS[4 + 2 * i - 1], KEYS[4 + 2 * i]
  redis.call('ZREM', ow, '!|' .. ARGV[1] .. '|' .. writer)
  if first ~= '' then redis.call('ZREM', ow, first .. '|' .. ARGV[1] .. '|' .. writer) end
  if not winners[writer] then redis.call('SADD', ab, ARGV[1] .. '|' .. writer) end
end
redis.call('HSET', KEYS[1], 'mat', 1)
redis.call('ZREM', KEYS[3], ARGV[1])
local segs = {}
for i = 1, n do segs[i] = ARGV[3 + i] end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'k', 'mat', 't', ARGV[1],
  'g', table.concat(segs, '\n'))
return {'OK'}
