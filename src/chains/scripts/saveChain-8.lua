--[[
  Writes a chain under its lock: the record, its intent, new history entries, and the indexes.
  KEYS and ARGV are laid out as includes/save-chain.lua describes.

  Returns 0 when written, -1 when the lock is not ours, -2 on a version mismatch.
]]
--- @include "includes/save-chain.lua"

local refusal = chainSaveRefusal(KEYS, ARGV)
if refusal then
  return refusal
end
writeChainSave(KEYS, ARGV)
return 0
