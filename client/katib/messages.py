"""Katib's suggestion API messages (``api.v1.beta1``), declared here with Katib's field numbers.

The wire contract is Katib's ``pkg/apis/manager/v1beta1/api.proto``: what matters on the wire is each
field's number and type, which this module declares for the messages the ``Suggestion`` service
exchanges (experiment, trials, suggestions, validation). The classes are built at import from a
descriptor (protobuf's own ``descriptor_pool`` and ``message_factory``), so no generated code and no
kubeflow-katib SDK is needed (that SDK pins a protobuf that clashes with Optuna's).

Fields Katib sends that this module does not declare (early stopping rules' DB address, ...) are kept
as unknown fields and ignored, as protobuf does for any newer peer.

>>> from calibo.katib.messages import GetSuggestionsRequest
>>> GetSuggestionsRequest(current_request_number=4).current_request_number
4
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

PACKAGE = "api.v1.beta1"
SUGGESTION_SERVICE = f"{PACKAGE}.Suggestion"
# the service name Katib's controller puts in the gRPC readiness and liveness probes of its suggestion pods
HEALTH_SERVICE = "manager.v1beta1.Suggestion"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _F.TYPE_STRING, "double": _F.TYPE_DOUBLE, "int32": _F.TYPE_INT32}

# enum name -> [(value name, number)]
ENUMS: dict[str, list[tuple[str, int]]] = {
    "ParameterType": [("UNKNOWN_TYPE", 0), ("DOUBLE", 1), ("INT", 2), ("DISCRETE", 3), ("CATEGORICAL", 4)],
    "Distribution": [("DISTRIBUTION_UNSPECIFIED", 0), ("UNIFORM", 1), ("LOG_UNIFORM", 2), ("NORMAL", 3),
                     ("LOG_NORMAL", 4)],
    "ObjectiveType": [("UNKNOWN", 0), ("MINIMIZE", 1), ("MAXIMIZE", 2)],
    "ComparisonType": [("UNKNOWN_COMPARISON", 0), ("EQUAL", 1), ("LESS", 2), ("GREATER", 3)],
    "TrialStatus.TrialConditionType": [("CREATED", 0), ("RUNNING", 1), ("SUCCEEDED", 2), ("KILLED", 3),
                                       ("FAILED", 4), ("METRICSUNAVAILABLE", 5), ("EARLYSTOPPED", 6),
                                       ("UNKNOWN", 7)],
}

# message name (nested ones as Outer.Inner) -> [(field, number, type)]; a type is a scalar, a message
# or enum name (resolved in the package), "repeated <type>" or "map<string,string>"
MESSAGES: dict[str, list[tuple[str, int, str]]] = {
    "Experiment": [("name", 1, "string"), ("spec", 2, "ExperimentSpec")],
    "ExperimentSpec": [("parameter_specs", 1, "ExperimentSpec.ParameterSpecs"), ("objective", 2, "ObjectiveSpec"),
                       ("algorithm", 3, "AlgorithmSpec"), ("early_stopping", 4, "EarlyStoppingSpec"),
                       ("parallel_trial_count", 5, "int32"), ("max_trial_count", 6, "int32"),
                       ("nas_config", 7, "NasConfig")],
    "ExperimentSpec.ParameterSpecs": [("parameters", 1, "repeated ParameterSpec")],
    "ParameterSpec": [("name", 1, "string"), ("parameter_type", 2, "ParameterType"),
                      ("feasible_space", 3, "FeasibleSpace")],
    "FeasibleSpace": [("max", 1, "string"), ("min", 2, "string"), ("list", 3, "repeated string"),
                      ("step", 4, "string"), ("distribution", 5, "Distribution")],
    "ObjectiveSpec": [("type", 1, "ObjectiveType"), ("goal", 2, "double"), ("objective_metric_name", 3, "string"),
                      ("additional_metric_names", 4, "repeated string")],
    "AlgorithmSpec": [("algorithm_name", 1, "string"), ("algorithm_settings", 2, "repeated AlgorithmSetting")],
    "AlgorithmSetting": [("name", 1, "string"), ("value", 2, "string")],
    "EarlyStoppingSpec": [("algorithm_name", 1, "string"),
                          ("algorithm_settings", 2, "repeated EarlyStoppingSetting")],
    "EarlyStoppingSetting": [("name", 1, "string"), ("value", 2, "string")],
    "NasConfig": [("graph_config", 1, "GraphConfig"), ("operations", 2, "NasConfig.Operations")],
    "NasConfig.Operations": [("operation", 1, "repeated Operation")],
    "GraphConfig": [("num_layers", 1, "int32"), ("input_sizes", 2, "repeated int32"),
                    ("output_sizes", 3, "repeated int32")],
    "Operation": [("operation_type", 1, "string"), ("parameter_specs", 2, "Operation.ParameterSpecs")],
    "Operation.ParameterSpecs": [("parameters", 1, "repeated ParameterSpec")],
    "Trial": [("name", 1, "string"), ("spec", 2, "TrialSpec"), ("status", 3, "TrialStatus")],
    "TrialSpec": [("objective", 2, "ObjectiveSpec"), ("parameter_assignments", 3, "TrialSpec.ParameterAssignments"),
                  ("labels", 4, "map<string,string>")],
    "TrialSpec.ParameterAssignments": [("assignments", 1, "repeated ParameterAssignment")],
    "ParameterAssignment": [("name", 1, "string"), ("value", 2, "string")],
    "TrialStatus": [("start_time", 1, "string"), ("completion_time", 2, "string"),
                    ("condition", 3, "TrialStatus.TrialConditionType"), ("observation", 4, "Observation")],
    "Observation": [("metrics", 1, "repeated Metric")],
    "Metric": [("name", 1, "string"), ("value", 2, "string")],
    "EarlyStoppingRule": [("name", 1, "string"), ("value", 2, "string"), ("comparison", 3, "ComparisonType"),
                          ("start_step", 4, "int32")],
    "GetSuggestionsRequest": [("experiment", 1, "Experiment"), ("trials", 2, "repeated Trial"),
                              ("current_request_number", 4, "int32"), ("total_request_number", 5, "int32")],
    "GetSuggestionsReply": [("parameter_assignments", 1, "repeated GetSuggestionsReply.ParameterAssignments"),
                            ("algorithm", 2, "AlgorithmSpec"),
                            ("early_stopping_rules", 3, "repeated EarlyStoppingRule")],
    "GetSuggestionsReply.ParameterAssignments": [("assignments", 1, "repeated ParameterAssignment"),
                                                 ("trial_name", 2, "string"), ("labels", 3, "map<string,string>")],
    "ValidateAlgorithmSettingsRequest": [("experiment", 1, "Experiment")],
    "ValidateAlgorithmSettingsReply": [],
}


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="calibo/katib/api.proto", package=PACKAGE, syntax="proto3")
    protos: dict[str, Any] = {}

    def message(path: str) -> descriptor_pb2.DescriptorProto:
        if path not in protos:
            outer, _, inner = path.rpartition(".")
            protos[path] = (message(outer).nested_type if outer else fdp.message_type).add(name=inner)
        return protos[path]

    for path, values in ENUMS.items():
        outer, _, inner = path.rpartition(".")
        enum = (message(outer).enum_type if outer else fdp.enum_type).add(name=inner)
        for value, number in values:
            enum.value.add(name=value, number=number)
    for path, fields in MESSAGES.items():
        proto = message(path)
        for name, number, kind in fields:
            field = proto.field.add(name=name, number=number, json_name=name, label=_F.LABEL_OPTIONAL)
            if kind == "map<string,string>":
                entry = proto.nested_type.add(name=f"{_camel(name)}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
                entry.field.add(name="value", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
                field.label, field.type = _F.LABEL_REPEATED, _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{path}.{entry.name}"
                continue
            if kind.startswith("repeated "):
                field.label, kind = _F.LABEL_REPEATED, kind.removeprefix("repeated ")
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = _F.TYPE_ENUM if kind in ENUMS else _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{kind}"
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message_class(path: str) -> type[Message]:
    """The class of message ``path`` (``"Trial"``, ``"TrialSpec.ParameterAssignments"``)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{path}"))


def enum_value(path: str, name: str) -> int:
    """The number of enum value ``name`` of enum ``path`` (``enum_value("ParameterType", "INT")``)."""
    return _POOL.FindEnumTypeByName(f"{PACKAGE}.{path}").values_by_name[name].number


def enum_name(path: str, number: int) -> str:
    """The name of enum ``path``'s value ``number`` (``"UNKNOWN"`` style names; a number Katib added
    later than this declaration answers ``"#<number>"``)."""
    value = _POOL.FindEnumTypeByName(f"{PACKAGE}.{path}").values_by_number.get(number)
    return value.name if value is not None else f"#{number}"


Experiment = message_class("Experiment")
ExperimentSpec = message_class("ExperimentSpec")
ParameterSpec = message_class("ParameterSpec")
FeasibleSpace = message_class("FeasibleSpace")
ObjectiveSpec = message_class("ObjectiveSpec")
AlgorithmSpec = message_class("AlgorithmSpec")
AlgorithmSetting = message_class("AlgorithmSetting")
Trial = message_class("Trial")
TrialSpec = message_class("TrialSpec")
TrialStatus = message_class("TrialStatus")
Observation = message_class("Observation")
Metric = message_class("Metric")
ParameterAssignment = message_class("ParameterAssignment")
GetSuggestionsRequest = message_class("GetSuggestionsRequest")
GetSuggestionsReply = message_class("GetSuggestionsReply")
ValidateAlgorithmSettingsRequest = message_class("ValidateAlgorithmSettingsRequest")
ValidateAlgorithmSettingsReply = message_class("ValidateAlgorithmSettingsReply")

__all__ = [
    "HEALTH_SERVICE", "SUGGESTION_SERVICE", "AlgorithmSetting", "AlgorithmSpec", "Experiment", "ExperimentSpec",
    "FeasibleSpace", "GetSuggestionsReply", "GetSuggestionsRequest", "Metric", "Observation", "ObjectiveSpec",
    "ParameterAssignment", "ParameterSpec", "Trial", "TrialSpec", "TrialStatus", "ValidateAlgorithmSettingsReply",
    "ValidateAlgorithmSettingsRequest", "enum_name", "enum_value", "message_class",
]
