#!lua
-- Bind a Spark sink id to the query that writes it, and read its progress. A sink id
-- belongs to one Spark query (one checkpoint): a different query reusing it would
-- inherit its progress and skip its own first batches. ``rebind`` moves the id to the
-- new query, whose progress starts over (the old query's commits are then fenced); the
-- old query's progress is kept in 'moved:<query id>', never erased, and that query can
-- never take the id back: with its committed headers collected, its replayed batches
-- would not be recognised and would commit a second time.
-- KEYS[1] the sink's progress hash   ARGV[1] query id   ARGV[2] '1' = rebind, '0' = refuse
-- returns {'OK', last committed batchId} | {'OTHER', query id it is bound to}
--       | {'MOVED', query id it is bound to, this query's last committed batchId}
local bound = redis.call('HGET', KEYS[1], 'qid')
if bound == ARGV[1] then return {'OK', redis.call('HGET', KEYS[1], 'batch') or '-1'} end
local moved = redis.call('HGET', KEYS[1], 'moved:' .. ARGV[1])
if moved then return {'MOVED', bound or '', moved} end
if bound and ARGV[2] ~= '1' then return {'OTHER', bound} end
if bound then
  redis.call('HSET', KEYS[1], 'moved:' .. bound, redis.call('HGET', KEYS[1], 'batch') or '-1')
end
redis.call('HDEL', KEYS[1], 'txn')
redis.call('HSET', KEYS[1], 'qid', ARGV[1], 'batch', -1)
return {'OK', '-1'}
