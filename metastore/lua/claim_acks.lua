#!lua
-- Put messages of one (segment, subscription) in PENDING_ACK under a transaction.
-- Individual claims conflict with another txn's claim on the same message or a
-- cumulative claim covering it; a cumulative claim conflicts with any other txn's
-- claim at or below it. All-or-nothing: conflicts are found before any write.
-- KEYS[1] claim table of (segment, subscription)
-- ARGV[1] txn id   ARGV[2] 'ind' | 'cum'   ARGV[3..] ack positions (lexicographic order)
-- returns {'OK'} | {'CONFLICT', position, holder}
local txn, mode = ARGV[1], ARGV[2]
local cum = redis.call('HGET', KEYS[1], '~cum')
local cum_txn, cum_pos = nil, nil
if cum then
  local bar = string.find(cum, '|', 1, true)
  cum_txn, cum_pos = string.sub(cum, 1, bar - 1), string.sub(cum, bar + 1)
end
if mode == 'ind' then
  for i = 3, #ARGV do
    local holder = redis.call('HGET', KEYS[1], ARGV[i])
    if holder and holder ~= txn then return {'CONFLICT', ARGV[i], holder} end
    if cum_txn and cum_txn ~= txn and ARGV[i] <= cum_pos then
      return {'CONFLICT', ARGV[i], cum_txn}
    end
  end
  for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], txn) end
  return {'OK'}
end
local pos = ARGV[3]
if cum_txn and cum_txn ~= txn then return {'CONFLICT', pos, cum_txn} end
local all = redis.call('HGETALL', KEYS[1])
for j = 1, #all, 2 do
  if all[j] ~= '~cum' and all[j + 1] ~= txn and all[j] <= pos then
    return {'CONFLICT', all[j], all[j + 1]}
  end
end
if cum_txn == txn and cum_pos > pos then pos = cum_pos end
redis.call('HSET', KEYS[1], '~cum', txn .. '|' .. pos)
return {'OK'}
