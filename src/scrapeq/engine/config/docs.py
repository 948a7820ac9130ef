"""What each setting means, one line of Markdown each: the text of the generated settings
reference (``docs/reference/settings.md``, written by ``scripts/gen_reference.py``; ``make
lint`` fails while it is stale). The defaults, units and bounds come from
:class:`scrapeq.engine.config.settings.Settings` and its specs
(:mod:`scrapeq.engine.config.specs`), never from here: a setting missing from this table, or a name
here that is no setting, fails the script.
"""

from __future__ import annotations

SETTING_DOCS: dict[str, str] = {
    "redis_url": "`redis://`, `rediss://` or `unix://`; unset: a private embedded server "
    "(`data_dir`)",
    "queue": "the queue's name (its Redis hash tag)",
    "max_attempts": "a job's attempt budget; past it the job dies `max_attempts`",
    "backoff_base": "a retry's full-jitter backoff: random up to base·2^n, capped",
    "backoff_cap": "the longest retry backoff",
    "lease": "a claim's lease; the worker's heartbeats renew it, an expired one is reaped",
    "request_timeout": "total deadline of one fetch, body included",
    "domain_concurrency": "jobs in flight per domain: a number (fixed), or `auto`: a limit "
    "learned per domain from latency and overload signals (429, 503, timeouts, resets), "
    "with a delay between request starts below the minimum",
    "domain_delay": "minimum seconds between request starts per domain",
    "breaker_failures": "consecutive failures that trip a domain's breaker",
    "breaker_window": "the failure-rate trip: calls in the sliding window",
    "breaker_rate": "the failure-rate trip: the share of failures in the window that trips",
    "breaker_min_calls": "the failure-rate trip: calls in the window before the rate counts",
    "slow_call": "a call slower than this counts as a failure (the job is still done)",
    "breaker_cooldown": "an open breaker's first open time, doubling per consecutive trip",
    "breaker_cooldown_max": "the longest open time",
    "breaker_max_trips": "consecutive trips after which the domain is retired: its backlog "
    "goes to the dead letters (reason `domain_unavailable`)",
    "global_trip_share": "the global-fault guard: the share of active domains whose breakers "
    "trip within `global_trip_window` that says the fault is ours (proxy, DNS, network) and "
    "pauses the queue (per partition)",
    "global_trip_min": "the global-fault guard: active domains a partition needs before the "
    "guard may pause it",
    "global_trip_window": "the global-fault guard: its window, seconds",
    "lanes": "lane name = offset in seconds, most urgent first",
    "allow_private": "allow fetching loopback, private and link-local addresses (the SSRF "
    "guard refuses them otherwise)",
    "max_body": "bytes; a larger response fails permanently",
    "max_throttles": "429/Retry-After deferrals a job may take (they spend no attempt)",
    "max_releases": "releases for our own faults (proxy down, sink failing) a job may take, "
    "backed off; past it the job dies `max_releases`; a worker stopping does not count",
    "max_redirects": "redirects followed per fetch",
    "proxy": "proxy URL, or a comma-separated list: the exit pool; each entry "
    "`URL [tier=NAME] [cost=X] [cost_gb=Y]` or `direct`; a job's exit is chosen by its claim "
    "per domain (least recently used among the exits usable for that domain in its tier); "
    "`http://` and `https://` proxies only, a user part that hides `@ / ? # \\` is refused "
    "without echoing it",
    "user_agent": "the User-Agent header",
    "respect_robots": "obey robots.txt (and its Crawl-delay); `crawl` obeys it unless set "
    "false in the environment or the config file",
    "shutdown_grace": "seconds in-flight jobs get to finish on SIGTERM",
    "data_dir": "where the embedded Redis keeps its AOF and pidfile",
    "max_payload": "bytes of a job's payload (its compact JSON text, `\\uXXXX` for "
    "non-ASCII); larger is refused at enqueue",
    "handler_timeout": "seconds a handler may run; then the job is retried",
    "max_job_time": "seconds a worker may hold a job; then heartbeats stop and the lease expires",
    "canonical_keep_fragments": "de-duplication tells `#a` from `#b` (client-side routes)",
    "canonical_keep_blank_values": "de-duplication tells `?a=&b=1` from `?b=1`",
    "keep_done": "seconds a done job's key is kept (with `done_at`) so `job show` can say "
    "done; 0: deleted at once",
    "unique": "`off`, `pending` (skip a URL while a job for it is pending) or `seen` (skip it "
    "once enqueued: never again, or until `recrawl_after` seconds); a boolean means `pending` "
    "or `off`",
    "recrawl_after": "with `unique = seen`, seconds after which a URL may be enqueued again "
    "(granularity: a quarter of it); unset: never",
    "seen_filter": "the seen-set: `exact`, or `bloom` (smaller; its false positives drop new URLs)",
    "seen_capacity": "the crawl's size in URLs: sizes the exact seen-set's buckets (fixed by "
    "the queue's first seen enqueue) and the Bloom filter",
    "seen_error_rate": "a Bloom seen-set's false-positive rate at `seen_capacity` URLs",
    "handler": "`package.module:function`, the worker's handler (unset: the built-in one)",
    "scope": "crawl scope for followed links: `host`, `domain` or `any`",
    "max_depth": "links followed from a seed at most (unset: no limit)",
    "max_pages": "pages per domain a crawl enqueues at most (unset: no limit)",
    "allow": "URL regular expressions a followed link must match",
    "deny": "URL regular expressions a followed link must not match (deny wins)",
    "log_format": "`text` or `json` (one object per line) for the log lines on stderr",
    "log_every": "seconds between the queue's progress lines (0: none); one worker of all logs it",
    "status_top": "domains `status`, the dashboard and `/metrics` show in detail: every "
    "domain when the queue has no more, else those with a breaker not closed, of the latest "
    "dead letters, the most urgent ready and the next to wake (the rest are counted)",
    "domain_ttl": "seconds after which a domain with nothing queued or in flight and a "
    "closed breaker is forgotten (its counters and overrides go); 0: never",
    "cluster": "Redis Cluster: `auto` detects it (INFO cluster), `on` requires one, `off` "
    "refuses one",
    "partitions": "hash tags one queue spreads its domains over (`{Q:0}`...), so over a "
    "cluster's nodes (1: the one tag `{Q}`); fixed while the queue holds anything",
    "metrics_top_domains": "domains with their own series on the dashboard's `/metrics`, the "
    "worst first (not closed, then most dead, in flight, ready), so the series stay bounded "
    "at any number of domains; 0: none",
    "domain_concurrency_min": "the lower bound of an `auto` domain's limit",
    "domain_concurrency_max": "the upper bound of an `auto` domain's limit",
    "politeness": "the key concurrency, delay, adaptive limits and breakers apply to: "
    "`host`, `domain` (registrable domain, port kept) or `ip` (a host joins `ip:<address>` "
    "once a worker fetched it; refused with `partitions` > 1); a job keeps its host for its "
    "URL, robots.txt and results",
    "domain_concurrency_urgent": "with `domain_concurrency = auto`, the limit a domain with "
    "no learned limit yet starts at when its most urgent ready job is of the most urgent "
    "lane (a critical burst for a new site), within the bounds; adaptive goes on from it",
    "proxy_file": "a file of exits, one `URL [tier=NAME] [cost=X] [cost_gb=Y]` a line (`#` "
    "comments), added to `proxy`; every bad line is reported at once, one line each (exit 2)",
    "proxy_tiers": "the tiers' names, cheapest first (default: the order they first appear)",
    "ban_statuses": "with an exit pool, a response with one of these statuses is a ban of "
    "that exit by that site: the pair is benched, the job goes through another exit",
    "ban_markers": "with an exit pool, texts whose presence in a body's first 64 KiB is a "
    "ban (a handler may also raise `scrapeq.Banned`)",
    "proxy_ban_cooldown": "how long a banned (exit, domain) pair rests, doubling while its "
    "bans repeat",
    "proxy_ban_cooldown_max": "the longest rest of a banned (exit, domain) pair",
    "proxy_cooldown": "how long a dead exit (refusing connections, credentials, or timing "
    "out for several domains) rests before one probe, doubling per consecutive trip",
    "proxy_cooldown_max": "the longest rest of a dead exit",
    "proxy_tier_quiet": "seconds after which a domain moved up a tier tries the cheaper tier again",
    "session": "`none`, or `sticky`: with an exit pool, each domain keeps one exit and a "
    "cookie jar (kept in Redis: any worker continues the session) until that exit is banned "
    "or down; then a new exit and a new jar",
    "revisit": "`on`: a page fetched (a job settled `done`) comes back by itself, when its "
    "estimated change rate, its weight and its domain's revisit budget say; revisits send "
    "`If-None-Match` / `If-Modified-Since` from the last answer's validators",
    "revisit_budget": "revisits per domain per hour; unset: half of what `domain_delay` "
    "allows (1800 / domain_delay), at most 360, and 360 without a delay",
    "revisit_min_interval": "seconds, the shortest interval between two visits of a page",
    "revisit_max_interval": "seconds, the longest: a page that never changed is visited "
    "this often; a page seen changing keeps at least half a fair share of its domain's "
    "budget instead",
    "max_bytes": "bytes a domain may download before its follow-ups and revisits are "
    "skipped (counted in `domains`: `skipped`, `revisits_skipped`; the page's results line "
    '`skipped: "budget"`)',
    "fetcher": "what fetches a job that names no fetcher, on a domain that names none: "
    "`http` (our HTTP/1.1 client; aiohttp through a proxy), `impersonate` (curl_cffi: a "
    "browser's TLS handshake and headers; the `impersonate` extra) or `browser` (chromium "
    "renders the page; the `browser` extra), or `auto` (each domain starts at `http`; the "
    "claim moves it up on evidence, for the whole fleet: docs/guide/fetchers.md); a job's "
    "own fetcher wins over its domain's, which wins over this setting",
    "auto_recheck": "fetcher `auto`: the share of a domain's pages above `http` fetched "
    "with the fetcher one level cheaper (every 1/share-th, decided by the claim); as good, "
    "the domain comes back down; 0: never",
    "impersonate_target": "the browser the `impersonate` fetcher looks like: one of "
    "curl_cffi's targets (`chrome152`, `firefox147`, `safari18_0` ...), checked when the "
    "fetcher starts",
    "browser_path": "the chromium the `browser` fetcher launches (Debian's; never one "
    "Playwright downloads); checked when the fetcher starts",
    "browsers": "chromium processes per worker process (the `browser` fetcher's pool)",
    "browser_pages": "pages each browser renders at once",
    "browser_recycle_pages": "a browser is retired (its pages finished, then closed and its "
    "process group killed) after that many pages",
    "browser_max_rss": "bytes: a browser whose whole process tree's RSS is above this is retired",
    "browser_block": "resource types the `browser` fetcher's pages never load (Playwright's "
    'names, comma-separated; `""` loads everything; `document` refused)',
    "browser_context": "`page`: a fresh browser context per page (no cookie, cache or storage "
    "crosses jobs); `browser`: one context per browser, shared by its pages until it is "
    "recycled (faster)",
    "browser_args": "more chromium flags, split as a shell does",
    "browser_bench_after": "crashes or failed launches in a row that bench a worker's browsers "
    "(its browser jobs wait, spending nothing; `status` raises `browsers_down`)",
    "browser_bench": "seconds a worker's benched browsers rest before one probe launch "
    "(doubling while probes fail, up to `browser_bench_max`)",
    "browser_bench_max": "the longest rest of a worker's benched browsers, seconds",
}
