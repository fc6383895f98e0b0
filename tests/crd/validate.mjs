// Validates prometheus-operator resources against the CRD schemas of
// @kubernetes-models/prometheus-operator. Reads a JSON array of manifests on
// stdin; prints one line per manifest; exits 1 when any is invalid.
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { readFileSync } from "node:fs";

const models = { PrometheusRule, ServiceMonitor };
let failed = false;
for (const doc of JSON.parse(readFileSync(0, "utf8"))) {
  const name = `${doc.kind}/${doc.metadata?.name}`;
  const Model = models[doc.kind];
  if (doc.apiVersion !== "monitoring.coreos.com/v1" || !Model) {
    console.log(`ERROR ${name}: no schema for ${doc.apiVersion} ${doc.kind}`);
    failed = true;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`ERROR ${name}: ${e.message}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
