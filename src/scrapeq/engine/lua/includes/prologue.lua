--[[
  The first lines every script runs (through common.lua): the inputs checked and decoded
  (P, CFG, ARG: check.lua, decode_inputs), effects replicated, NOW read from the server clock
  plus the offset ARGV[1], and the random seed of the call (ARG.seed) applied.
]]
--@include check
local P = KEYS[1]
local CFG, ARG, REFUSED = decode_inputs()
if REFUSED then return redis.error_reply(REFUSED) end

if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local NOW
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + (tonumber(ARGV[1]) or 0)
end

if ARG.seed then
  math.randomseed(ARG.seed)
end
