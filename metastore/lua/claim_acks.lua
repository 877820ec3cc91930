#!lua
-- Put messages of one (segment, subscription) in PENDING_ACK under a transaction.
-- Individual claims conflict with another txn's claim on the same message, a
-- cumulative claim covering it, or a committed ack of it (a tombstone: '=<txn>' on
-- the message, or '~tomb', the highest committed cumulative ack). A cumulative claim
-- conflicts with another txn's live claim at or below it, with '~tomb' at or above
-- it, and with a committed ack of any message it names as given to its consumer
-- again (after a Failover switch the broker may hand an acked message to the next
-- consumer; a cumulative ack past messages it was never given is Pulsar's normal
-- case and must pass). All-or-nothing: conflicts are found before any write.
-- KEYS[1] claim table of (segment, subscription)
-- ARGV[1] txn id   ARGV[2] 'ind' | 'cum'
-- 'ind': ARGV[3..] ack positions (lexicographic order)
-- 'cum': ARGV[3] ack position, ARGV[4..] positions its consumer was given up to it
-- returns {'OK'} | {'CONFLICT', position, holder, 'OPEN' | 'COMMITTED'}
local txn, mode = ARGV[1], ARGV[2]
local function txn_and_pos(field)  -- '~cum' and '~tomb' hold 'txn|position'
  local v = redis.call('HGET', KEYS[1], field)
  if not v then return nil, nil end
  local bar = string.find(v, '|', 1, true)
  return string.sub(v, 1, bar - 1), string.sub(v, bar + 1)
end
local tomb_txn, tomb_pos = txn_and_pos('~tomb')
local cum_txn, cum_pos = txn_and_pos('~cum')
-- '~trimmed': tombstones at or below it were dropped (trim_acks.lua); all acked
local trimmed = redis.call('HGET', KEYS[1], '~trimmed')
local TRIMMED = 'an ack at or below the trimmed horizon'
local function holder_of(value)
  if string.sub(value, 1, 1) == '=' then return string.sub(value, 2), 'COMMITTED' end
  return value, 'OPEN'
end
if mode == 'ind' then
  for i = 3, #ARGV do
    local held = redis.call('HGET', KEYS[1], ARGV[i])
    if held and held ~= txn then
      local h, s = holder_of(held)
      return {'CONFLICT', ARGV[i], h, s}
    end
    if cum_txn and cum_txn ~= txn and ARGV[i] <= cum_pos then
      return {'CONFLICT', ARGV[i], cum_txn, 'OPEN'}
    end
    if tomb_pos and ARGV[i] <= tomb_pos then
      return {'CONFLICT', ARGV[i], tomb_txn, 'COMMITTED'}
    end
    if trimmed and ARGV[i] <= trimmed then return {'CONFLICT', ARGV[i], TRIMMED, 'COMMITTED'} end
  end
  for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], txn) end
  return {'OK'}
end
local pos = ARGV[3]
if tomb_pos and pos <= tomb_pos then return {'CONFLICT', pos, tomb_txn, 'COMMITTED'} end
if trimmed and pos <= trimmed then return {'CONFLICT', pos, TRIMMED, 'COMMITTED'} end
if cum_txn and cum_txn ~= txn then return {'CONFLICT', pos, cum_txn, 'OPEN'} end
for i = 4, #ARGV do
  local given = ARGV[i]
  if tomb_pos and given <= tomb_pos then return {'CONFLICT', given, tomb_txn, 'COMMITTED'} end
  if trimmed and given <= trimmed then return {'CONFLICT', given, TRIMMED, 'COMMITTED'} end
  local held = redis.call('HGET', KEYS[1], given)
  if held and string.sub(held, 1, 1) == '=' then
    return {'CONFLICT', given, string.sub(held, 2), 'COMMITTED'}
  end
end
local all = redis.call('HGETALL', KEYS[1])
for j = 1, #all, 2 do
  local f, v = all[j], all[j + 1]
  -- acked messages below a cumulative ack are fine (Pulsar acks past them); live
  -- claims of other transactions are not
  if string.sub(f, 1, 1) ~= '~' and string.sub(v, 1, 1) ~= '=' and v ~= txn and f <= pos then
    return {'CONFLICT', f, v, 'OPEN'}
  end
end
if cum_txn == txn and cum_pos > pos then pos = cum_pos end
redis.call('HSET', KEYS[1], '~cum', txn .. '|' .. pos)
return {'OK'}
