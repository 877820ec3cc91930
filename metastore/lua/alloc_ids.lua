#!lua
-- Hand out a block of transaction ids of one partition (cached by the caller), after
-- the server-change check, so a block is never handed out inside a gap of ids that
-- may have been lost (create_txn refuses those).
-- KEYS[1] sequence counter   KEYS[2] gc hash (watermark, run)   KEYS[3] gaps of unknown ids
-- ARGV[1] block size
-- returns the last id of the block
--#include epoch
local epoch_err = check_epoch(KEYS[1], KEYS[2], KEYS[3])
if epoch_err then return epoch_err end
return redis.call('INCRBY', KEYS[1], ARGV[1])
