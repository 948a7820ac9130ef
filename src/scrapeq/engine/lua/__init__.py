"""The Python<->Lua boundary: the Lua scripts (``*.lua``, ``includes/``) and the code
that names, loads, configures and calls them (``scripts``: one typed wrapper per script;
``args``, ``config``, ``wire``: what crosses to Lua; ``source``: loading and includes;
``once``, ``owed``: the small ledgers' calls; ``browsers``: a worker's benched browsers;
``schema``: migrations before the scripts run).
"""
