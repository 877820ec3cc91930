#!lua
-- Mark a committed txn's acks on one (segment, subscription) as applied to the cursor.
-- KEYS[1] header   KEYS[2] ack records   ARGV[1] field 'segment|subscription'
-- returns {'OK'} | {'ALREADY'} | {'GONE'}
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {'GONE'} end
local rec = cjson.decode(cur)
if rec.applied then return {'ALREADY'} end
rec.applied = true
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(rec))
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 'ao', -1) end
return {'OK'}
