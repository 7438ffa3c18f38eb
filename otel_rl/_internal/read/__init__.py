"""Reading run files: the one reader layer under ``otel-rl convert`` and ``otel-rl report``.

Floor 3: imports the base modules, ``recording`` and ``encode``, never
``export`` or the public modules. Every module says what it reads:

* :mod:`.limits` - what one input may cost (:class:`~.limits.InputLimits`) and its options;
* :mod:`.source`, :mod:`.lines` - a bounded, possibly gzipped file and its lines;
* :mod:`.discovery` - the files a list of inputs names; :mod:`.names` - what a file's name says;
* :mod:`.sniff` - what a file holds, from its first line;
* :mod:`.jsonl` - JSON lines files, bad lines reported with their line numbers;
* :mod:`.chrome_json` - Chrome JSON documents; :mod:`.torch_trace` - torch profiler traces;
* :mod:`.chrome_events` - Chrome trace events (otel_rl's JSONL, AReaL's) as spans and instants;
* :mod:`.otlp_json` - OTLP/JSON requests as SDK spans;
* :mod:`.sessions` - session records (otel_rl's and AReaL's), in worker processes when large
  (:mod:`.pool`), kept packed (:mod:`.packed`);
* :mod:`.request_events` - request events (sglang-omni's format);
* :mod:`.stats_exports` - ``otel_rl.stats`` exports;
* :mod:`.checks` - whether an id or a time read from JSON can be used.
"""
