#!lua
-- First use of a namespace, in one step: its partition count, its key layout and its
-- deployment id are fixed together, so no opener ever sees one without the others.
-- A new namespace spreads its partition tags over the slot space (keys.Keys) and keeps
-- its deployment id in 'dep'; 'deployment' (the field versions before the spread tags
-- read) gets a value no reader of this version accepts: an older process that opens a
-- spread namespace stamps its entries with it and they are never delivered, and this
-- version's entries are never delivered to it either (fail closed both ways).
-- A namespace created before keeps its plain tags and its id in 'deployment'.
-- 'wire': the form of a transactional append's properties (records.WIRE_*). A new
-- namespace gets ARGV[4]; one created by an earlier build has none, and keeps the form
-- its readers know (1) until an operator upgrades it.
-- KEYS[1] config hash
-- ARGV[1] partitions for a new namespace   ARGV[2] a fresh deployment id
-- ARGV[3] key layout for a new namespace (e.g. 'spread1')   ARGV[4] its wire format
-- ARGV[5] '0': a reader's open, which never creates the namespace (absent: create)
-- returns {partitions, key layout, deployment id, wire format}; {} for a namespace
-- that does not exist when ARGV[5] is '0'
if redis.call('HEXISTS', KEYS[1], 'partitions') == 0 then
  if ARGV[5] == '0' then
    return {}
  end
  redis.call('HSET', KEYS[1], 'tags', ARGV[3], 'dep', ARGV[2],
             'deployment', 'refused-by-spread-tags:' .. ARGV[2], 'partitions', ARGV[1],
             'wire', ARGV[4])
end
local c = redis.call('HMGET', KEYS[1], 'partitions', 'tags', 'deployment', 'dep', 'wire')
local tags = c[2]
if not tags then
  tags = 'plain'  -- created by a version before the key layout was recorded
  redis.call('HSET', KEYS[1], 'tags', tags)
end
local dep = c[4]
if not dep then
  dep = c[3]
  if not dep then  -- an older opener set the partitions and has not set its id yet
    dep = ARGV[2]
    redis.call('HSETNX', KEYS[1], 'deployment', dep)
    dep = redis.call('HGET', KEYS[1], 'deployment')
  end
end
return {c[1], tags, dep, c[5] or '1'}
