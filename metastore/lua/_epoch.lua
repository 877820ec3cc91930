-- Shared prelude (included where a script says '--#include epoch'): notice that the
-- server under this state changed (a restart, a failover, a restore from a copy) before
-- handing out ids or moving the collected watermark. Anything created after the state's
-- last durable point may be gone: the ids above the collected watermark up to far past
-- the counter become a gap of unknown ids (never "collected", so a lost txn's entries
-- are never delivered), and the counter jumps past it (a lost id is never reused).
-- Needs: seq_key (counter), gc_key (hash: w = collected watermark, run = server run id),
-- gaps_key (zset of unknown ranges 'first:last' scored by first).
local EPOCH_JUMP = 4294967296
-- Returns nothing, or an error reply the caller must return at once (nothing written).
local function check_epoch(seq_key, gc_key, gaps_key)
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if not run then return redis.error_reply('cannot read the server run_id (INFO server)') end
  local seen = redis.call('HGET', gc_key, 'run')
  if seen == run then return end
  local w = tonumber(redis.call('HGET', gc_key, 'w') or '0')
  local c = tonumber(redis.call('GET', seq_key) or '0')
  if not seen then
    -- first use of this state by this library version: ids handed out before it keep
    -- their old meaning (a missing header at or below the counter was collected)
    if c > w then redis.call('HSET', gc_key, 'w', string.format('%d', c)) end
    redis.call('HSET', gc_key, 'run', run)
    return
  end
  local top = c + EPOCH_JUMP
  local first = w + 1
  local prev = redis.call('ZREVRANGE', gaps_key, 0, 0)[1]  -- gaps stay disjoint, ordered
  if prev then
    local last = tonumber(string.sub(prev, string.find(prev, ':', 1, true) + 1))
    if last >= first then first = last + 1 end
  end
  redis.call('ZADD', gaps_key, first, string.format('%d:%d', first, top))
  redis.call('SET', seq_key, string.format('%d', top))
  redis.call('HSET', gc_key, 'run', run)
end
