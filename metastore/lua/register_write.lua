#!lua
-- Register a writer-run on a segment BEFORE its first append (the H1/H3 fence), and
-- tell it the wire format its appends carry: the partition's (set by an operator's
-- switch), else the namespace's as the writer opened it. The header records every form
-- its runs registered ('wf<form>'), so a switch can wait for the transactions whose
-- runs may still append the other form (MetadataStore.txns_writing_other_form).
-- KEYS[1] header   KEYS[2] write records   KEYS[3] open-write index of the segment
-- KEYS[4] the partition's wire format
-- ARGV[1] seq   ARGV[2] segment   ARGV[3] writer   ARGV[4] the namespace's wire format
-- returns {'OK', wire} | {'DUP', value, wire} | {'NOTFOUND'} | {'NOTOPEN', state}
--       | {'TIMEDOUT'}
local h = redis.call('HMGET', KEYS[1], 'st', 'dl')
if not h[1] then return {'NOTFOUND'} end
if h[1] ~= 'OPEN' then return {'NOTOPEN', h[1]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(h[2]) then return {'TIMEDOUT'} end
local wire = redis.call('GET', KEYS[4]) or ARGV[4]
redis.call('HSET', KEYS[1], 'wf' .. wire, 1)
local field = ARGV[2] .. '|' .. ARGV[3]
local cur = redis.call('HGET', KEYS[2], field)
if cur then return {'DUP', cur, wire} end
redis.call('HSET', KEYS[2], field, ',')
redis.call('HINCRBY', KEYS[1], 'wv', 1)
-- '!' sorts before every hex position: a pending registration is seen first
redis.call('ZADD', KEYS[3], 0, '!|' .. ARGV[1] .. '|' .. ARGV[3])
return {'OK', wire}
