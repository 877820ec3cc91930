#!lua
-- Split or merge: seal the parents and create the children in one step, only if the
-- caller planned against the current epoch. Sealing here is what fences writers that
-- hold the old layout: a write registration checks the segment is still ACTIVE.
-- Validates everything before the first write (Lua has no rollback).
-- KEYS[1] DAG hash   KEYS[2] topic event stream
-- ARGV[1] expected epoch   ARGV[2] stream maxlen   ARGV[3] next segment id after the change
-- ARGV[4] parent ids (JSON array)   ARGV[5..] child descriptors (JSON)
-- returns {'OK', epoch} | {'STALE', epoch} | {'NOTFOUND'} | {'NOTACTIVE', id}
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'next')
if not cur[1] then return {'NOTFOUND'} end
if cur[1] ~= ARGV[1] then return {'STALE', cur[1]} end
local epoch = tonumber(cur[1]) + 1
local parents = cjson.decode(ARGV[4])
local kids = {}
for i = 5, #ARGV do
  local d = cjson.decode(ARGV[i])
  if redis.call('HEXISTS', KEYS[1], 'seg:' .. d['id']) == 1 then return {'STALE', cur[1]} end
  kids[#kids + 1] = d['id']
end
local descs = {}
for i, id in ipairs(parents) do
  local raw = redis.call('HGET', KEYS[1], 'seg:' .. id)
  if not raw then return {'NOTACTIVE', tostring(id)} end
  local d = cjson.decode(raw)
  if d['state'] ~= 'ACTIVE' then return {'NOTACTIVE', tostring(id)} end
  descs[i] = d
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i, d in ipairs(descs) do
  d['state'] = 'SEALED'
  d['se'] = epoch
  d['st'] = now
  d['children'] = kids
  redis.call('HSET', KEYS[1], 'seg:' .. d['id'], cjson.encode(d))
end
for i = 5, #ARGV do
  local d = cjson.decode(ARGV[i])
  redis.call('HSET', KEYS[1], 'seg:' .. d['id'], ARGV[i])
end
redis.call('HSET', KEYS[1], 'epoch', epoch, 'next', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'k', 'layout', 'e', epoch)
return {'OK', tostring(epoch)}
