#!lua
-- Fix a sealed segment's last entry (once: the first caller's value stands, so every
-- reader and every replay stops the segment at the same entry).
-- KEYS[1] DAG hash   KEYS[2] topic event stream
-- ARGV[1] segment id   ARGV[2] end ('-' = no entry, else 'ledger:entry')   ARGV[3] maxlen
-- returns {'OK', end} | {'ALREADY', end} | {'NOTFOUND'} | {'ACTIVE'}
local raw = redis.call('HGET', KEYS[1], 'seg:' .. ARGV[1])
if not raw then return {'NOTFOUND'} end
local d = cjson.decode(raw)
if d['state'] ~= 'SEALED' then return {'ACTIVE'} end
if d['end'] ~= nil and d['end'] ~= '' then return {'ALREADY', d['end']} end
d['end'] = ARGV[2]
redis.call('HSET', KEYS[1], 'seg:' .. ARGV[1], cjson.encode(d))
redis.call('HINCRBY', KEYS[1], 'ver', 1)
local epoch = redis.call('HGET', KEYS[1], 'epoch')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'k', 'end', 'e', epoch, 's', ARGV[1])
return {'OK', ARGV[2]}
