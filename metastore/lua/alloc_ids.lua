#!lua
-- Hand out a block of transaction ids of one partition (cached by the caller), after
-- the server-change check, so a block is never handed out inside a gap of ids that
-- may have been lost (create_txn refuses those). No id is handed out before the
-- server's clock (TIME, in microseconds) reaches it (see _epoch.lua): the block is cut
-- to what the clock allows, and a caller that finds none due waits that long.
-- KEYS[1] sequence counter   KEYS[2] gc hash (watermark, run)   KEYS[3] gaps of unknown ids
-- ARGV[1] block size
-- returns {'OK', first id, last id} | {'AHEAD', microseconds until the next id is due}
--#include epoch
local epoch_err = check_epoch(KEYS[1], KEYS[2], KEYS[3])
if epoch_err then return epoch_err end
local due = ids_due(KEYS[1])
if due < 1 then return {'AHEAD', string.format('%d', 1 - due)} end
local n = math.min(tonumber(ARGV[1]), due)
local last = redis.call('INCRBY', KEYS[1], n)
return {'OK', string.format('%d', last - n + 1), string.format('%d', last)}
