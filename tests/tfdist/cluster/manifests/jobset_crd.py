"""The JobSet v1alpha2 schema of kubernetes-sigs/jobset v0.12.0 (tests/data/jobset, with its
source and license), as a JSON Schema validator that refuses unknown fields, as `kubectl apply
--validate=strict` does; and the rules that the schema leaves out: the JobSet webhook's on names,
the API server's on label values, resource quantities, mount paths and image references.

Kubernetes validates a custom resource against its CRD's OpenAPI v3 schema and prunes (or, with
strict validation, refuses) fields the schema does not list. This turns that schema into a JSON
Schema: every object schema that lists properties refuses others (unless it says
x-kubernetes-preserve-unknown-fields), and x-kubernetes-int-or-string becomes integer or string.
Not checked: the CRD's CEL rules (x-kubernetes-validations: immutability on update, startupPolicy
with dependsOn) and the API server's own ObjectMeta checks, apart from the name and labels.
"""

import functools
import pathlib
import re

import jsonschema
import yaml

CRD_PATH = (
    pathlib.Path(__file__).resolve().parents[3] / "data" / "jobset" / "jobset.x-k8s.io_jobsets.yaml"
)
API_VERSION = "jobset.x-k8s.io/v1alpha2"
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# k8s.io/apimachinery resource.Quantity: a signed decimal with a binary, decimal or exponent
# suffix; the API server also refuses a request of zero for what tfdist writes (cpu, memory).
# An image reference as container runtimes parse it (distribution/reference), simplified: a
# registry host with its port, lowercase path components, a tag, a sha256 digest.
_IMAGE = re.compile(
    r"([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*"
    r"(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@sha256:[0-9a-f]{64})?",
    re.ASCII,
)
_QUANTITY = re.compile(r"[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]+)?")


def _strict(node):
    """The JSON Schema of an OpenAPI v3 structural schema `node`, unknown fields refused."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    schema = {
        key: _strict(value)
        for key, value in node.items()
        if not key.startswith("x-kubernetes-") and key != "nullable"
    }
    if node.get("x-kubernetes-int-or-string"):
        schema.pop("anyOf", None)
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        schema["additionalProperties"] = False
    return schema


@functools.cache
def validator() -> jsonschema.Draft7Validator:
    """Validates a JobSet document against the CRD's v1alpha2 schema, strictly."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    schema["properties"]["apiVersion"] = {"const": API_VERSION}
    schema["properties"]["kind"] = {"const": "JobSet"}
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def webhook_problems(document: dict) -> list[str]:
    """What the JobSet webhook (pkg/webhooks/jobset_webhook.go, ValidateCreate) would refuse of
    the names: the subdomain, each Job's name and each pod's (with the Job controller's
    5-character suffix) must be RFC 1035 labels of at most 63 characters, and the success
    policy may name only replicated jobs of the JobSet."""
    problems = []
    name = document["metadata"]["name"]
    subdomain = document["spec"].get("network", {}).get("subdomain")
    names = [subdomain] if subdomain else []
    replicated = [job["name"] for job in document["spec"]["replicatedJobs"]]
    for job in document["spec"]["replicatedJobs"]:
        replicas = job.get("replicas", 1)
        completions = job["template"]["spec"].get("completions", 1)
        names.append(f"{name}-{job['name']}-{replicas - 1}")
        names.append(f"{name}-{job['name']}-{replicas - 1}-{completions - 1}-abcde")
    problems += [
        f"{text!r} is not an RFC 1035 label of at most 63 characters"
        for text in names
        if len(text) > 63 or not _DNS1035.fullmatch(text)
    ]
    targets = document["spec"].get("successPolicy", {}).get("targetReplicatedJobs", [])
    problems += [
        f"successPolicy names {target!r}, not a replicated job"
        for target in targets
        if target not in replicated
    ]
    labels = dict(document["metadata"].get("labels", {}))
    for job in document["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        labels.update(pod.get("nodeSelector", {}))
        labels.update(
            (toleration["key"], toleration["value"])
            for toleration in pod.get("tolerations", [])
            if "value" in toleration
        )
        for container in pod["containers"]:
            problems += _container_problems(container)
    for key, value in labels.items():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            problems.append(f"label {key}={value!r} is not a label value")
    return problems


def _container_problems(container: dict) -> list[str]:
    problems = (
        []
        if _IMAGE.fullmatch(container["image"])
        else [f"image {container['image']!r} is not an image reference"]
    )
    resources = container.get("resources", {})
    for kind in ("requests", "limits"):
        for resource, amount in resources.get(kind, {}).items():
            text = str(amount)
            if (
                not _QUANTITY.fullmatch(text)
                or len(text) > 32
                or not 0 < float(text.rstrip("KMGTPEinumk") or 0) < float("inf")
            ):
                problems.append(f"{kind} {resource}={amount!r} is not a positive quantity")
    for mount in container.get("volumeMounts", []):
        path = mount["mountPath"]
        if (
            not path.startswith("/")
            or not path.isprintable()
            or path.split("/")[1] in ("", "etc", "usr", "bin", "lib", "proc", "sys", "dev")
        ):
            problems.append(f"mountPath {path!r} hides the container's own files")
    return problems
