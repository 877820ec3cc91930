#!lua
-- Record that a Spark sink committed a batch (monotonic), so a replayed batchId
-- is recognised as committed even after its transaction's header was collected.
-- KEYS[1] sink progress hash   ARGV[1] batchId   ARGV[2] txn id
-- returns the sink's last committed batchId after the call
local cur = tonumber(redis.call('HGET', KEYS[1], 'batch') or '-1')
local b = tonumber(ARGV[1])
if b > cur then
  redis.call('HSET', KEYS[1], 'batch', b, 'txn', ARGV[2])
  cur = b
end
return cur
