--[[
  When a done page's results line waits for the settle's answer (issue 39), in one place:
  the settle script decides part of such a line (WIRE.DONE: `changed`, `not_modified`,
  `skipped` for follow-ups cut at a budget, `revisit_skipped`), so the worker writes it from
  that answer instead of before the settle.

  RULE.line_waits(cfg) -> nil | 'follow' | 'always', from the queue's config alone (pure):
    'always'  revisit = on (CFG.rv): the settle says whether the page changed (revisit.lua)
    'follow'  a per-domain budget (CFG.max_pages or CFG.max_bytes): the settle may cut the
              page's follow-ups (enqueue.lua, over_max_pages), so the line of a done page
              with follow-ups waits
    nil       the settle adds nothing to a done page's line: it is written before the settle
  A claim hands it to each job it answers (claim-1.lua: `line_waits`, absent when nil); the
  worker applies it without knowing why (scrapeq/runtime/lines.py).
  RULE.line_notes(cfg, it, notes): the notes a done settle answers for item `it` (nil when
  its line did not wait: then nobody writes a line from them), so the answer and the claim's
  flag never disagree. Tested table-driven (tests/engine/test_line_rule.py).
]]
--@include rules

function RULE.line_waits(cfg)
  if cfg.rv then return 'always' end
  if tonumber(cfg.max_pages) or tonumber(cfg.max_bytes) then return 'follow' end
  return nil
end

function RULE.line_notes(cfg, it, notes)
  local waits = RULE.line_waits(cfg)
  if waits == 'always' or (waits == 'follow' and type(it.follow) == 'table'
      and #it.follow > 0) then
    return notes
  end
  return nil
end
