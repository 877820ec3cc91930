#!lua
-- Bind a Spark sink id to the query that writes it, and read its progress. A sink id
-- belongs to one Spark query (one checkpoint): a different query reusing it would
-- inherit its progress and skip its own first batches. ``rebind`` moves the id to the
-- new query and starts its progress over (the old query's commits are then fenced).
-- KEYS[1] the sink's progress hash   ARGV[1] query id   ARGV[2] '1' = rebind, '0' = refuse
-- returns {'OK', last committed batchId} | {'OTHER', query id it is bound to}
local bound = redis.call('HGET', KEYS[1], 'qid')
if bound == ARGV[1] then return {'OK', redis.call('HGET', KEYS[1], 'batch') or '-1'} end
if bound and ARGV[2] ~= '1' then return {'OTHER', bound} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'qid', ARGV[1], 'batch', -1)
return {'OK', '-1'}
