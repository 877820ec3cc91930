#!lua
-- Withdraw a writer-run registration that never appended (its segment was sealed
-- between registration and append): the gate of the sealed segment need not wait
-- for the transaction to end. A run with a recorded position is never withdrawn.
-- KEYS[1] write records   KEYS[2] open-write index of the segment
-- ARGV[1] seq   ARGV[2] segment   ARGV[3] writer
-- returns {'OK'} | {'KEPT'} (it has a position, or is unknown)
local field = ARGV[2] .. '|' .. ARGV[3]
local cur = redis.call('HGET', KEYS[1], field)
if cur ~= ',' then return {'KEPT'} end
redis.call('HDEL', KEYS[1], field)
redis.call('ZREM', KEYS[2], '!|' .. ARGV[1] .. '|' .. ARGV[3])
return {'OK'}
