#!lua
-- Register a writer-run on a segment BEFORE its first append (the H1/H3 fence).
-- KEYS[1] header   KEYS[2] write records   KEYS[3] open-write index of the segment
-- ARGV[1] seq   ARGV[2] segment   ARGV[3] writer
-- returns {'OK'} | {'DUP', value} | {'NOTFOUND'} | {'NOTOPEN', state} | {'TIMEDOUT'}
local h = redis.call('HMGET', KEYS[1], 'st', 'dl')
if not h[1] then return {'NOTFOUND'} end
if h[1] ~= 'OPEN' then return {'NOTOPEN', h[1]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(h[2]) then return {'TIMEDOUT'} end
local field = ARGV[2] .. '|' .. ARGV[3]
local cur = redis.call('HGET', KEYS[2], field)
if cur then return {'DUP', cur} end
redis.call('HSET', KEYS[2], field, ',')
redis.call('HINCRBY', KEYS[1], 'wv', 1)
-- '!' sorts before every hex position: a pending registration is seen first
redis.call('ZADD', KEYS[3], 0, '!|' .. ARGV[1] .. '|' .. ARGV[3])
return {'OK'}
