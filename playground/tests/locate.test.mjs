// Unit tests of the YAML field-path locator (node --test).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { locate, parsePath } from "../web/locate.js";

const example = (name) => readFileSync(new URL(`../examples/${name}`, import.meta.url), "utf8");
const lineOf = (text, path) => text.split("\n")[locate(text, path) - 1]?.trim();

test("paths split into keys and indexes", () => {
  assert.deepEqual(parsePath("spec.subsets[2].patch.spec.containers[0].name"),
    ["spec", "subsets", 2, "patch", "spec", "containers", 0, "name"]);
});

test("block style, sequences at their key's indentation, v1alpha1 aliases", () => {
  const z = example("zones.yaml");
  assert.equal(lineOf(z, "spec.subsets[1].maxReplicas"), "maxReplicas: 50%");
  assert.equal(lineOf(z, "spec.subsets[2].name"), "- name: zone-c");
  assert.equal(lineOf(z, "spec.targetRef.kind"), "kind: Deployment");
  // v1beta1 path, v1alpha1 field name; flow-style leaf → the line holding it.
  assert.match(lineOf(z, "spec.subsets[0].requiredNodeSelector.matchExpressions[0].values"),
    /^- \{key: topology.kubernetes.io\/zone/);
});

test("the WorkloadSpread document of a multi-document manifest", () => {
  const a = example("arch.yaml");
  assert.equal(lineOf(a, "spec.subsets[0].patch.spec.containers[0].name"), "- name: main");
  // `spec.replicas` exists only in the Deployment document: not found, nearest is `spec`.
  assert.equal(lineOf(a, "spec.replicas"), "spec:");
  assert.equal(locate("kind: WorkloadSpread\n", "spec.subsets[0]"), null);
});

test("sequences indented under their key, comments and quoted keys", () => {
  const y = "kind: WorkloadSpread\nspec:\n  # note\n  subsets:\n    - name: a\n      \"maxReplicas\": 1\n    - name: b\n";
  assert.equal(locate(y, "spec.subsets[1].name"), 7);
  assert.equal(locate(y, "spec.subsets[0].maxReplicas"), 6);
});
