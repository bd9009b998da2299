"""tune_optuna: Optuna's samplers as a `tune` external searcher (search_alg: {type: external}).

    search_alg:
      type: external
      command: [/usr/bin/python3, -m, tune_optuna, --sampler, TPESampler,
                --sampler-kwargs, '{"n_startup_trials": 5}']

It speaks tune's JSON-lines protocol on stdin/stdout (docs/SEARCH.md): one Optuna study, driven
with ask/tell, over the param_space tune sends at init. Any sampler of optuna.samplers by name
(TPESampler, CmaEsSampler, NSGAIISampler, QMCSampler, RandomSampler, ... or the short names
tpe, cmaes, nsgaii, qmc, random) with its keyword arguments as a JSON object; the experiment's
seed is the sampler's `seed` unless the keyword arguments give one. On `save` it pickles the
study (its storage and sampler, RNG included) and the map of running trials into the directory,
and `init` with that directory continues the same study.

Space mapping: uniform / loguniform -> FloatDistribution (log), quniform -> FloatDistribution
with step, qloguniform -> a log FloatDistribution rounded to q, randint [lo, hi) / lograndint ->
IntDistribution(lo, hi - 1) (log), qrandint -> IntDistribution over the multiples of q in
[lo, hi] with step q, qlograndint -> a log IntDistribution over the same range, rounded to q,
randn [mean, sd] -> FloatDistribution(mean - 4 sd, mean + 4 sd) (Optuna has no normal
distribution; the prior is then uniform there), qrandn -> the same rounded to q, choice ->
CategoricalDistribution (values that are not scalars by their index). grid_search cannot be
modelled: init answers {"ok": false, "error": ...} naming the parameter. Trials that fail, or
end without the metric, are told to the study as FAIL; intermediate results are reported as
intermediate values (for pruners).
Only the standard library and Debian's python3-optuna are needed (run it with /usr/bin/python3).
"""
