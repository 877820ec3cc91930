#!lua
-- Mark decisions as fsynced (durability=waitaof). Called only after a WAITAOF confirmed
-- that the decision, read on the same connection before a write of its own, reached the
-- disk: a reader that finds the mark acts on the decision without a wait of its own, and
-- GC collects only marked decisions. A header gone, or in another state than the one
-- confirmed (a restore came between), is left alone.
-- KEYS[1] .. KEYS[n] headers (one partition's slot)   ARGV[1] .. ARGV[n] the state confirmed for each
-- returns the number of headers marked
local n = 0
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'st') == ARGV[i] then
    redis.call('HSET', KEYS[i], 'fs', 1)
    n = n + 1
  end
end
return n
