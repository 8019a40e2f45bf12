"""Katib's suggestion service (calibo katib): Katib's wire format, the experiment's mapping, and a
replayed experiment through gRPC against a live calibo server, with an adapter restart mid-way."""

from __future__ import annotations

import random
from collections import Counter

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from calibo import Client
from calibo.katib import TRIAL_LABEL, Unsupported, build_server, definition
from calibo.katib import messages as m
from tests.conftest import unique

SUGGEST = "/api.v1.beta1.Suggestion/GetSuggestions"
VALIDATE = "/api.v1.beta1.Suggestion/ValidateAlgorithmSettings"


def _experiment(name: str, settings: dict[str, str] | None = None, *, algorithm: str = "calibo",
                extra: list | None = None) -> m.Experiment:
    e = m.Experiment(name=name)
    spec = e.spec
    spec.objective.type = m.enum_value("ObjectiveType", "MINIMIZE")
    spec.objective.objective_metric_name = "loss"
    spec.objective.additional_metric_names.append("accuracy")
    spec.algorithm.algorithm_name = algorithm
    for k, v in (settings or {}).items():
        spec.algorithm.algorithm_settings.add(name=k, value=v)
    spec.parallel_trial_count, spec.max_trial_count = 4, 60
    params = spec.parameter_specs.parameters
    lr = params.add(name="lr", parameter_type=m.enum_value("ParameterType", "DOUBLE"))
    lr.feasible_space.min, lr.feasible_space.max = "0.0001", "0.1"
    lr.feasible_space.distribution = m.enum_value("Distribution", "LOG_UNIFORM")
    layers = params.add(name="layers", parameter_type=m.enum_value("ParameterType", "INT"))
    layers.feasible_space.min, layers.feasible_space.max = "1", "8"
    drop = params.add(name="dropout", parameter_type=m.enum_value("ParameterType", "DOUBLE"))
    drop.feasible_space.min, drop.feasible_space.max, drop.feasible_space.step = "0", "0.5", "0.1"
    opt = params.add(name="optimizer", parameter_type=m.enum_value("ParameterType", "CATEGORICAL"))
    opt.feasible_space.list.extend(["sgd", "adam", "rmsprop"])
    batch = params.add(name="batch", parameter_type=m.enum_value("ParameterType", "DISCRETE"))
    batch.feasible_space.list.extend(["64.0", "16", "32"])
    for p in extra or []:
        params.append(p)
    return e


# ------------------------------------------------------------------ the wire: Katib's field numbers
def test_messages_carry_katibs_field_numbers() -> None:
    """Bytes written by hand from Katib's api.proto (v1beta1) numbers parse to the declared fields, and
    the declared messages write those bytes: field 4 / 5 of GetSuggestionsRequest are the request
    numbers, a reply's assignments are field 1 with name 1, value 2, labels 3."""
    # current_request_number (4, varint 4) and total_request_number (5, varint 12): tags 0x20 and 0x28
    assert m.GetSuggestionsRequest.FromString(b"\x20\x04\x28\x0c").current_request_number == 4
    assert m.GetSuggestionsRequest(total_request_number=12).SerializeToString() == b"\x28\x0c"
    # Experiment{name="e"(1), spec(2){objective(2){type(1)=MAXIMIZE(2), objective_metric_name(3)="m"}}}
    e = m.Experiment.FromString(b"\x0a\x01e\x12\x07\x12\x05\x08\x02\x1a\x01m")
    assert (e.name, e.spec.objective.type, e.spec.objective.objective_metric_name) == ("e", 2, "m")
    # Trial{name(1)="t", status(3){condition(3)=EARLYSTOPPED(6), observation(4){metrics(1){name,value}}}}
    t = m.Trial.FromString(b"\x0a\x01t\x1a\x0c\x18\x06\x22\x08\x0a\x06\x0a\x01l\x12\x011")
    assert m.enum_name("TrialStatus.TrialConditionType", t.status.condition) == "EARLYSTOPPED"
    assert (t.status.observation.metrics[0].name, t.status.observation.metrics[0].value) == ("l", "1")
    # TrialSpec labels: a map at field 4
    spec = m.TrialSpec.FromString(b"\x22\x06\x0a\x01k\x12\x01v")
    assert dict(spec.labels) == {"k": "v"}
    reply = m.GetSuggestionsReply()
    a = reply.parameter_assignments.add()
    a.assignments.add(name="x", value="1")
    assert reply.SerializeToString() == b"\x0a\x08\x0a\x06\x0a\x01x\x12\x011"
    a.labels["k"] = "v"
    assert reply.SerializeToString() == b"\x0a\x10\x0a\x06\x0a\x01x\x12\x011\x1a\x06\x0a\x01k\x12\x01v"
    # FeasibleSpace: max 1, min 2, list 3, step 4, distribution 5
    fs = m.FeasibleSpace.FromString(b"\x0a\x011\x12\x010\x1a\x01a\x22\x01s\x28\x02")
    assert (fs.max, fs.min, list(fs.list), fs.step, fs.distribution) == ("1", "0", ["a"], "s", 2)


# ------------------------------------------------------------------ the experiment as a study
def test_experiment_maps_to_a_calibo_study() -> None:
    d = definition(_experiment("exp-a", {"surrogate": "qgbm", "seed": "7", "n_warmup": "6"}))
    assert d.name == "katib-exp-a" and d.direction == "minimize" and d.metric == "loss"
    assert d.space["lr"] == {"type": "float", "low": 0.0001, "high": 0.1, "log": True}
    assert d.space["layers"] == {"type": "int", "low": 1, "high": 8, "log": False}
    assert d.space["dropout"] == {"type": "ordinal", "choices": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]}
    assert d.space["optimizer"] == {"type": "categorical", "choices": ["sgd", "adam", "rmsprop"]}
    assert d.space["batch"] == {"type": "ordinal", "choices": [16, 32, 64]}
    assert d.options == {"surrogate": "qgbm", "seed": 7, "settings": {"n_warmup": 6}}
    # values go back as Katib's own strings: the discrete list's text, not the parsed number
    params = {"lr": 0.001, "layers": 3, "dropout": 0.2, "optimizer": "adam", "batch": 64}
    assert d.assignment(params) == [("lr", "0.001"), ("layers", "3"), ("dropout", "0.2"),
                                    ("optimizer", "adam"), ("batch", "64.0")]
    renamed = definition(_experiment("exp-a", {"study_name": "shared"}))
    assert renamed.name == "shared" and "settings" not in renamed.options


@pytest.mark.parametrize("change, reason", [
    (lambda e: e.spec.parameter_specs.parameters[0].feasible_space.__setattr__(
        "distribution", m.enum_value("Distribution", "NORMAL")), "normal distribution"),
    (lambda e: e.spec.parameter_specs.parameters[1].feasible_space.__setattr__("max", "1"), "must be below"),
    (lambda e: e.spec.parameter_specs.parameters[0].feasible_space.__setattr__("min", "0"), "min > 0"),
    (lambda e: e.spec.parameter_specs.parameters[2].feasible_space.__setattr__("step", "0.00001"), "more than"),
    (lambda e: e.spec.parameter_specs.parameters[4].feasible_space.list.append("big"), "not a number"),
    (lambda e: e.spec.objective.__setattr__("type", 0), "minimize or maximize"),
    (lambda e: e.spec.algorithm.__setattr__("algorithm_name", "tpe"), "serves 'calibo'"),
    (lambda e: e.spec.nas_config.graph_config.__setattr__("num_layers", 3), "nasConfig"),
    (lambda e: e.spec.parameter_specs.parameters[3].__setattr__("parameter_type", 0), "UNKNOWN_TYPE"),
])
def test_what_calibo_cannot_express_is_refused_with_the_reason(change, reason) -> None:
    e = _experiment("exp-b")
    change(e)
    with pytest.raises(Unsupported, match=reason):
        definition(e)


# ------------------------------------------------------------------ gRPC against a live server
class CountingClient(Client):
    """A client that counts the tells per trial id (shared by the adapter's instances)."""

    def __init__(self, url: str, tells: Counter) -> None:
        super().__init__(url, retry_deadline=20.0)
        self.tells = tells

    def tell(self, study_id, trial_id, value=None, **kw):
        self.tells[int(trial_id)] += 1
        return super().tell(study_id, trial_id, value, **kw)


class Adapter:
    """``calibo katib`` on a port that survives restarts."""

    def __init__(self, url: str, tells: Counter) -> None:
        self.url, self.tells, self.port = url, tells, 0
        self.starts = 0
        self.start()

    def start(self) -> None:
        self.client = CountingClient(self.url, self.tells)
        self.server, self.port = build_server(self.client, f"127.0.0.1:{self.port}")
        self.server.start()
        self.starts += 1
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.suggest = self.channel.unary_unary(SUGGEST, request_serializer=m.GetSuggestionsRequest.SerializeToString,
                                                response_deserializer=m.GetSuggestionsReply.FromString)
        self.validate = self.channel.unary_unary(
            VALIDATE, request_serializer=m.ValidateAlgorithmSettingsRequest.SerializeToString,
            response_deserializer=m.ValidateAlgorithmSettingsReply.FromString)

    def stop(self) -> None:
        self.channel.close()
        self.server.stop(None).wait()
        self.client.close()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def adapter(server):
    a = Adapter(server.url, Counter())
    yield a
    a.stop()


def test_health_and_validation_over_grpc(adapter, server) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{adapter.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for name in ("", "manager.v1beta1.Suggestion"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    name = unique("katib")
    adapter.validate(m.ValidateAlgorithmSettingsRequest(experiment=_experiment(name, {"n_warmup": "5"})), timeout=30)
    with Client(server.url) as c:  # validation created the study, with the settings
        assert c.load_study(f"katib-{name}").view["settings"]["n_warmup"] == 5
    cases = [
        (_experiment(unique("katib"), {"n_warmupp": "5"}), "n_warmupp"),
        (_experiment(unique("katib"), {"surrogate": "nope"}), "surrogate"),
        (_experiment(unique("katib"), algorithm="random"), "serves 'calibo'"),
    ]
    normal = _experiment(unique("katib"))
    normal.spec.parameter_specs.parameters[0].feasible_space.distribution = m.enum_value("Distribution",
                                                                                          "LOG_NORMAL")
    cases.append((normal, "log-normal distribution"))
    # the study exists with another definition: refused, naming the way out
    clash = _experiment(name)
    clash.spec.objective.type = m.enum_value("ObjectiveType", "MAXIMIZE")
    cases.append((clash, "study_name"))
    for experiment, reason in cases:
        with pytest.raises(grpc.RpcError) as err:
            adapter.validate(m.ValidateAlgorithmSettingsRequest(experiment=experiment), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason in err.value.details(), err.value.details()


def _loss(params: dict[str, str]) -> float:
    import math

    return ((math.log10(float(params["lr"])) + 2.5) ** 2 + 0.1 * (int(params["layers"]) - 4) ** 2
            + float(params["dropout"]) + {"sgd": 0.3, "adam": 0.0, "rmsprop": 0.1}[params["optimizer"]]
            + abs(float(params["batch"]) - 32) / 100)


class Controller:
    """What Katib's controller does across an experiment: ask for suggestions up to the parallel count,
    send every trial (running and finished, as Katib's ConvertTrials does) with each request, trials
    finishing in a random order."""

    def __init__(self, experiment: m.Experiment, seed: int) -> None:
        self.experiment = experiment
        self.trials: list[m.Trial] = []
        self.requested = 0
        self.rng = random.Random(seed)
        self.suggested: list[tuple[tuple[str, str], ...]] = []

    def request(self, count: int, *, repeat: bool = False) -> m.GetSuggestionsRequest:
        if not repeat:
            self.requested += count
        sent = [t for t in self.trials
                if t.status.condition != m.enum_value("TrialStatus.TrialConditionType", "METRICSUNAVAILABLE")]
        return m.GetSuggestionsRequest(experiment=self.experiment, trials=sent, current_request_number=count,
                                       total_request_number=self.requested)

    def accept(self, reply: m.GetSuggestionsReply) -> None:
        for a in reply.parameter_assignments:
            t = m.Trial(name=f"{self.experiment.name}-{len(self.trials):03d}")
            t.spec.parameter_assignments.assignments.extend(a.assignments)
            t.spec.labels.update(a.labels)
            t.status.condition = m.enum_value("TrialStatus.TrialConditionType", "RUNNING")
            self.trials.append(t)
            self.suggested.append(tuple((x.name, x.value) for x in a.assignments))

    def running(self) -> list[m.Trial]:
        return [t for t in self.trials
                if t.status.condition == m.enum_value("TrialStatus.TrialConditionType", "RUNNING")]

    def finish(self, trial: m.Trial, condition: str = "SUCCEEDED") -> None:
        params = {a.name: a.value for a in trial.spec.parameter_assignments.assignments}
        trial.status.condition = m.enum_value("TrialStatus.TrialConditionType", condition)
        if condition in ("SUCCEEDED", "EARLYSTOPPED"):
            trial.status.observation.metrics.add(name="loss", value=repr(_loss(params)))
            trial.status.observation.metrics.add(name="accuracy", value="0.5")


def test_a_replayed_experiment_of_60_trials_in_batches_of_4(adapter, server) -> None:
    """60 trials, 4 in parallel, finishing out of order; one request retried, the adapter restarted
    twice, trials failed, killed and early-stopped: 60 distinct suggestions, each result told once."""
    name = unique("katib")
    ctl = Controller(_experiment(name, {"seed": "3"}), seed=11)
    adapter.validate(m.ValidateAlgorithmSettingsRequest(experiment=ctl.experiment), timeout=30)
    special = {9: "FAILED", 21: "KILLED", 30: "EARLYSTOPPED", 41: "METRICSUNAVAILABLE"}
    requests = 0
    while len(ctl.trials) < 60 or ctl.running():
        free = min(4 - len(ctl.running()), 60 - len(ctl.trials))
        if free > 0:
            reply = adapter.suggest(ctl.request(free), timeout=60)
            assert len(reply.parameter_assignments) == free  # exactly current_request_number
            requests += 1
            if requests == 5:  # Katib lost the reply and sends the same request again: the same trials
                again = adapter.suggest(ctl.request(free, repeat=True), timeout=60)
                assert again.SerializeToString() == reply.SerializeToString()
            ctl.accept(reply)
            if requests in (6, 11):
                adapter.restart()
        # one to three running trials finish, in a random order
        running = ctl.running()
        for t in ctl.rng.sample(running, k=min(len(running), ctl.rng.randint(1, 3))):
            ctl.finish(t, special.get(ctl.trials.index(t), "SUCCEEDED"))
    adapter.suggest(ctl.request(0), timeout=60)  # Katib's last sync reports the last results
    assert adapter.starts == 3

    assert len(ctl.suggested) == 60 and len(set(ctl.suggested)) == 60
    ids = [int(t.spec.labels[TRIAL_LABEL]) for t in ctl.trials]
    assert len(set(ids)) == 60
    with Client(server.url) as c:
        trials = list(c.iter_trials(c.load_study(f"katib-{name}").id))
    assert sorted(t["id"] for t in trials) == sorted(ids)  # every suggestion is a trial of the study
    by_id = {t["id"]: t for t in trials}
    # each result reached the study once; the trial Katib dropped (metrics unavailable) stays running there
    told = {i for i in ids if adapter.tells[i]}
    assert all(n == 1 for n in adapter.tells.values()) and len(told) == 59
    assert by_id[ids[41]]["state"] == "running" and ids[41] not in told
    states = Counter(by_id[i]["state"] for i in told)
    assert states == Counter(complete=56, failed=2, pruned=1)
    for k, t in enumerate(ctl.trials):
        view = by_id[ids[k]]
        params = {a.name: a.value for a in t.spec.parameter_assignments.assignments}
        if k != 41:
            assert view["user_attrs"]["katib_trial"] == t.name
        if view["state"] == "complete":
            assert view["value"] == pytest.approx(_loss(params))
            assert view["user_attrs"]["katib_metrics"] == {"accuracy": "0.5"}
    assert by_id[ids[30]]["state"] == "pruned" and by_id[ids[9]]["state"] == "failed"


def test_a_trial_without_the_label_is_matched_by_its_assignments(adapter, server) -> None:
    name = unique("katib")
    ctl = Controller(_experiment(name), seed=2)
    ctl.accept(adapter.suggest(ctl.request(2), timeout=60))
    for t in ctl.trials:
        del t.spec.labels[TRIAL_LABEL]
    ctl.finish(ctl.trials[1])
    adapter.suggest(ctl.request(1), timeout=60)
    adapter.suggest(ctl.request(0), timeout=60)  # again: no second tell
    assert sum(adapter.tells.values()) == 1
    with Client(server.url) as c:
        done = c.trials(c.load_study(f"katib-{name}").id, state="complete")["trials"]
    assert [t["user_attrs"]["katib_trial"] for t in done] == [ctl.trials[1].name]


def test_the_calibo_server_down_answers_unavailable() -> None:
    tells: Counter = Counter()
    a = Adapter("http://127.0.0.1:9", tells)
    try:
        with pytest.raises(grpc.RpcError) as err:
            a.suggest(Controller(_experiment(unique("katib")), seed=0).request(1), timeout=60)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        a.stop()
