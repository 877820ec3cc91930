-- Shared prelude (included where a script says '--#include epoch'): notice that the
-- server under this state changed (a restart, a failover, a restore from a copy) before
-- handing out ids or moving the collected watermark. Anything created after the state's
-- last durable point may be gone: the ids above the collected watermark up to the jump
-- become a gap of unknown ids (never "collected", so a lost txn's entries are never
-- delivered), and the counter jumps past every id that may have been handed out.
--
-- Why the server's clock and not a jump relative to the counter: the counter comes
-- back with the state, so a jump from it repeats when the same saved state is started
-- twice (a backup restored twice, a crash loop after a restore), and a state saved
-- before a partition's first id jumps from 0. Instead an id is handed out only once the
-- server's TIME, in microseconds, has reached it (ids_due): every id handed out before a
-- start is at most that moment's TIME, and each start jumps to its own TIME, past all
-- of them, whatever was restored, how often and in which order. (It assumes the
-- server's clock does not go back across a restart; see docs/durability.md.)
-- Needs: seq_key (counter), gc_key (hash: w = collected watermark, run = server run id),
-- gaps_key (zset of unknown ranges 'first:last' scored by first).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- How many ids above the counter the server's clock allows to hand out now (<= 0: none).
local function ids_due(seq_key)
  return now_us() - tonumber(redis.call('GET', seq_key) or '0')
end
-- Returns nothing, or an error reply the caller must return at once (nothing written).
local function check_epoch(seq_key, gc_key, gaps_key)
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if not run then return redis.error_reply('cannot read the server run_id (INFO server)') end
  local seen = redis.call('HGET', gc_key, 'run')
  if seen == run then return end
  local w = tonumber(redis.call('HGET', gc_key, 'w') or '0')
  local c = tonumber(redis.call('GET', seq_key) or '0')
  if not seen and c > w then
    -- a state an earlier version used: the ids it handed out keep their old meaning
    -- (a missing header at or below its counter was collected)
    redis.call('HSET', gc_key, 'w', string.format('%d', c))
    w = c
  end
  -- also a partition never seen on this state before: it may be a saved state from
  -- before the partition's first ids, which another start of it handed out and lost
  local top = math.max(c, now_us())
  local first = w + 1
  local prev = redis.call('ZREVRANGE', gaps_key, 0, 0)[1]  -- gaps stay disjoint, ordered
  if prev then
    local last = tonumber(string.sub(prev, string.find(prev, ':', 1, true) + 1))
    if last >= first then first = last + 1 end
  end
  if top >= first then
    redis.call('ZADD', gaps_key, first, string.format('%d:%d', first, top))
  end
  redis.call('SET', seq_key, string.format('%d', top))
  redis.call('HSET', gc_key, 'run', run)
end
