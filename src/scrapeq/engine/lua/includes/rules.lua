--[[
  RULE: the namespace of the engine's small pure rules (issue 39), one table so that each
  costs an expanded script no top-level local of its own (tests/engine/test_lua_locals.py):
  RULE.backoff (backoff.lua), RULE.budget_spent (budgets.lua).
]]
local RULE = {}  --@once
