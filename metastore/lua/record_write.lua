#!lua
-- Record the first (and/or last) append position of a registered writer-run.
-- KEYS[1] header   KEYS[2] write records   KEYS[3] open-write index   KEYS[4] event stream
-- ARGV[1] seq   ARGV[2] segment   ARGV[3] writer   ARGV[4] first ('' = keep)
-- ARGV[5] last ('' = keep)   ARGV[6] stream maxlen
-- returns {'OK'} | {'NOTFOUND'} | {'NOTREG'} | {'NOTOPEN', state}
local st = redis.call('HGET', KEYS[1], 'st')
if not st then return {'NOTFOUND'} end
if st ~= 'OPEN' then return {'NOTOPEN', st} end
local field = ARGV[2] .. '|' .. ARGV[3]
local cur = redis.call('HGET', KEYS[2], field)
if not cur then return {'NOTREG'} end
local comma = string.find(cur, ',', 1, true)
local first, last = string.sub(cur, 1, comma - 1), string.sub(cur, comma + 1)
if first == '' and ARGV[4] ~= '' then
  first = ARGV[4]
  redis.call('ZREM', KEYS[3], '!|' .. ARGV[1] .. '|' .. ARGV[3])
  redis.call('ZADD', KEYS[3], 0, first .. '|' .. ARGV[1] .. '|' .. ARGV[3])
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'k', 'pos', 't', ARGV[1],
    'g', ARGV[2])
end
if ARGV[5] ~= '' then last = ARGV[5] end
redis.call('HSET', KEYS[2], field, first .. ',' .. last)
return {'OK'}
