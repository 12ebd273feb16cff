--[[
  Stores a new order unless its caller id exists, and the chain state it leads to (see
  includes/create-order.lua for KEYS and ARGV).

  Returns {1, stored JSON} when the caller id exists (a replay: the caller compares params),
          {0, new JSON} when stored,
          {-1, ""} when the chain moved on since the caller read it (re-plan and retry),
          {-2, ""} when the customer is unknown.
]]
--- @include "includes/create-order.lua"

local refusal, customerJson = orderInsertRefusal(KEYS, ARGV)
if refusal then
  return refusal
end
local stored = writeNewOrder(KEYS, ARGV, customerJson)
return {0, stored}
