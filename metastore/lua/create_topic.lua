#!lua
-- Create a scalable topic: epoch 1 with its initial ACTIVE segments.
-- KEYS[1] DAG hash   KEYS[2] topic event stream
-- ARGV[1] stream maxlen   ARGV[2] next segment id   ARGV[3] key hash function
-- ARGV[4..] segment descriptors (JSON)
-- returns {'OK', epoch} | {'EXISTS', epoch}
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if epoch then return {'EXISTS', epoch} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 4, #ARGV do
  local d = cjson.decode(ARGV[i])
  redis.call('HSET', KEYS[1], 'seg:' .. d['id'], ARGV[i])
end
redis.call('HSET', KEYS[1], 'epoch', 1, 'next', ARGV[2], 'created', now, 'ver', 1,
  'hash', ARGV[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'k', 'layout', 'e', 1)
return {'OK', '1'}
