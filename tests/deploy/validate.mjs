#!/usr/bin/env node
// Static checks of deploy/ (run by tests/deploy/deploy_test.sh, see
// tests/deploy/CMakeLists.txt):
//
//   node validate.mjs k8s SOURCE_DIR [--rendered DIR=FILE ...]
//     Every Kubernetes manifest under deploy/k8s (and every object each
//     kustomization builds) is validated against Kubernetes' published OpenAPI
//     schemas (npm package kubernetes-models): a wrong type, a missing required
//     field or an unknown field fails. Then the references between objects are
//     checked (Service selectors and ports, volumes, ConfigMap keys, probes,
//     resources, $(VAR) references, the job spec against the worker Job, the
//     Prometheus DNS names against the Services). --rendered gives the output
//     of `kubectl kustomize DIR`: it is validated too and must equal what this
//     script builds (so the small kustomize below is checked against the real one).
//   node validate.mjs compose SOURCE_DIR
//     deploy/docker-compose.yml against deploy/prometheus/prometheus.yml and the
//     Grafana provisioning: flags, ports, volumes, healthchecks, targets.
//   node validate.mjs dashboard SOURCE_DIR
//     deploy/grafana/dashboards/*.json and deploy/prometheus/alerts.yml: layout,
//     and every metric they use is in the metric reference of docs/operations.md.
//   node validate.mjs selftest
//     The schema validation catches a wrong type, a missing required field and
//     an unknown field (so that a passing run means something).
//
// Prints TAP ("ok N - ...", "not ok N - ...") and exits 1 if any check failed.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';

let count = 0;
let failures = 0;
function ok(message) {
  console.log(`ok ${++count} - ${message}`);
}
function notOk(message, details = []) {
  failures++;
  console.log(`not ok ${++count} - ${message}`);
  for (const line of [].concat(details)) console.log(`#   ${line}`);
}
function check(condition, message, details = []) {
  if (condition) ok(message);
  else notOk(message, details);
  return condition;
}
function finish() {
  console.log(`1..${count}`);
  if (failures > 0) console.log(`# ${failures} of ${count} checks failed`);
  process.exit(failures > 0 ? 1 : 0);
}

// ---------------------------------------------------------------------------
// YAML

// Kubernetes reads YAML 1.1 (sigs.k8s.io/yaml): 0555 is octal there.
const K8S_YAML = { version: '1.1', uniqueKeys: true, prettyErrors: true };

// Parses every document of a YAML text; throws on a syntax error or a
// duplicate key.
function parseAll(text, file, options = K8S_YAML) {
  const docs = YAML.parseAllDocuments(text, options);
  const out = [];
  for (const doc of [].concat(docs)) {
    if (doc.errors && doc.errors.length) {
      throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`);
    }
    const value = doc.toJS({ maxAliasCount: 100 });
    if (value !== null && value !== undefined) out.push(value);
  }
  return out;
}

function readYaml(file, options) {
  return parseAll(fs.readFileSync(file, 'utf8'), file, options);
}

// ---------------------------------------------------------------------------
// Schema validation: kubernetes-models' validators (generated from the
// Kubernetes OpenAPI schemas) check types, enums and required fields. The
// schemas allow unknown fields, as the OpenAPI document does; the API server
// drops them (or refuses them, with kubectl --validate=strict). To find them,
// the object is validated through a Proxy that records which fields the
// validator looked at: a field it never read is not in the schema. (An object
// whose keys the validator enumerates is a map, e.g. labels: any key is fine.)

// kubernetes-models also holds API versions that current clusters no longer
// serve (apps/v1beta1, extensions/v1beta1...): only these are accepted.
const SERVED_API_VERSIONS = new Set([
  'v1', 'apps/v1', 'batch/v1', 'policy/v1', 'autoscaling/v2', 'networking.k8s.io/v1',
  'rbac.authorization.k8s.io/v1', 'storage.k8s.io/v1', 'scheduling.k8s.io/v1',
]);

const modelCache = new Map();
async function modelFor(apiVersion, kind) {
  if (!SERVED_API_VERSIONS.has(apiVersion)) return null;
  const key = `${apiVersion}/${kind}`;
  if (!modelCache.has(key)) {
    let model = null;
    try {
      const module = await import(`kubernetes-models/${apiVersion}`);
      model = module[kind] ?? null;
    } catch {
      model = null;
    }
    modelCache.set(key, model);
  }
  return modelCache.get(key);
}

function tracked(value, where, seen, enumerated) {
  if (value === null || typeof value !== 'object') return value;
  const children = new Map();
  return new Proxy(value, {
    get(target, key, receiver) {
      const result = Reflect.get(target, key, receiver);
      if (typeof key !== 'string') return result;
      seen.add(`${where}/${key}`);
      if (result === null || typeof result !== 'object') return result;
      if (!children.has(key)) {
        children.set(key, tracked(result, `${where}/${key}`, seen, enumerated));
      }
      return children.get(key);
    },
    has(target, key) {
      if (typeof key === 'string') seen.add(`${where}/${key}`);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      enumerated.add(where);
      return Reflect.ownKeys(target);
    },
  });
}

function unknownFields(value, where, seen, enumerated, out) {
  if (value === null || typeof value !== 'object') return;
  for (const key of Object.keys(value)) {
    const child = `${where}/${key}`;
    if (!Array.isArray(value) && !enumerated.has(where) && !seen.has(child)) {
      out.push(`${child || '/'}: unknown field "${key}"`);
      continue;
    }
    unknownFields(value[key], child, seen, enumerated, out);
  }
}

// Returns the schema problems of one object (empty if it is valid).
async function schemaProblems(object) {
  if (!object || typeof object !== 'object' || Array.isArray(object)) {
    return ['not a mapping'];
  }
  const { apiVersion, kind } = object;
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') {
    return ['apiVersion and kind are required strings'];
  }
  const model = await modelFor(apiVersion, kind);
  if (!model || typeof model.prototype.validate !== 'function') {
    return [`no published schema for ${apiVersion} ${kind} (served API versions: ${[...SERVED_API_VERSIONS].join(', ')})`];
  }
  const problems = [];
  const seen = new Set();
  const enumerated = new Set();
  try {
    model.prototype.validate.call(tracked(object, '', seen, enumerated));
  } catch (error) {
    const details = error.errors ?? error.details;
    if (Array.isArray(details) && details.length) {
      for (const e of details) {
        const extra = e.params?.missingProperty ? ` (${e.params.missingProperty})` : '';
        problems.push(`${e.instancePath || '/'}: ${e.message}${extra}`);
      }
    } else {
      problems.push(error.message);
    }
    return problems;
  }
  unknownFields(object, '', seen, enumerated, problems);
  if (!object.metadata?.name) problems.push('/metadata/name: required');
  return problems;
}

function describe(object) {
  const ns = object?.metadata?.namespace ? `${object.metadata.namespace}/` : '';
  return `${object?.kind} ${ns}${object?.metadata?.name}`;
}

// ---------------------------------------------------------------------------
// A small kustomize: resources (files and kustomization directories),
// configMapGenerator (files, literals, labels; no name hash), namespace,
// images, and JSON 6902 patches, in kustomize's order. The real kustomize's
// output (kubectl kustomize) is compared with it when given.

const KUSTOMIZATION_FIELDS = new Set([
  'apiVersion', 'kind', 'resources', 'namespace', 'images', 'patches', 'configMapGenerator',
]);
const CLUSTER_SCOPED = new Set([
  'Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PersistentVolume', 'StorageClass',
  'CustomResourceDefinition', 'PriorityClass',
]);

function kustomizationFile(dir) {
  for (const name of ['kustomization.yaml', 'kustomization.yml', 'Kustomization']) {
    const file = path.join(dir, name);
    if (fs.existsSync(file)) return file;
  }
  return null;
}

function inside(dir, file) {
  const relative = path.relative(path.resolve(dir), path.resolve(file));
  return relative !== '' && !relative.startsWith('..') && !path.isAbsolute(relative);
}

function decodePointer(pointer) {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new Error(`bad JSON pointer "${pointer}"`);
  return pointer.slice(1).split('/').map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
}

// Applies JSON 6902 operations (add, remove, replace, test) to `document`.
function applyJsonPatch(document, operations) {
  for (const op of operations) {
    const parts = decodePointer(op.path);
    const last = parts.pop();
    let parent = document;
    for (const part of parts) {
      if (parent === null || typeof parent !== 'object' || !(part in parent)) {
        throw new Error(`${op.op} ${op.path}: no such path`);
      }
      parent = parent[part];
    }
    const isArray = Array.isArray(parent);
    const index = isArray ? (last === '-' ? parent.length : Number(last)) : last;
    const exists = isArray ? index >= 0 && index < parent.length : parent && last in parent;
    switch (op.op) {
      case 'add':
        if (isArray) parent.splice(index, 0, structuredClone(op.value));
        else parent[last] = structuredClone(op.value);
        break;
      case 'remove':
        if (!exists) throw new Error(`remove ${op.path}: no such path`);
        if (isArray) parent.splice(index, 1);
        else delete parent[last];
        break;
      case 'replace':
        if (!exists) throw new Error(`replace ${op.path}: no such path`);
        parent[index] = structuredClone(op.value);
        break;
      case 'test':
        if (JSON.stringify(parent[index]) !== JSON.stringify(op.value)) {
          throw new Error(`test ${op.path}: value differs`);
        }
        break;
      default:
        throw new Error(`unsupported patch operation "${op.op}"`);
    }
  }
}

function podSpecs(object) {
  const spec = object.spec ?? {};
  if (['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job'].includes(object.kind)) {
    return spec.template?.spec ? [spec.template.spec] : [];
  }
  if (object.kind === 'CronJob') return [spec.jobTemplate?.spec?.template?.spec].filter(Boolean);
  if (object.kind === 'Pod') return [spec];
  return [];
}

function podTemplate(object) {
  if (['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job'].includes(object.kind)) {
    return object.spec?.template;
  }
  return null;
}

function allContainers(spec) {
  return [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
}

// Builds the kustomization in `dir`; returns its objects. Throws on a problem
// kustomize would refuse.
function kustomize(dir) {
  const file = kustomizationFile(dir);
  if (!file) throw new Error(`${dir}: no kustomization.yaml`);
  const [k] = readYaml(file);
  for (const key of Object.keys(k ?? {})) {
    if (!KUSTOMIZATION_FIELDS.has(key)) {
      throw new Error(`${file}: field "${key}" is not supported by this check`);
    }
  }
  if (k.apiVersion !== 'kustomize.config.k8s.io/v1beta1' || k.kind !== 'Kustomization') {
    throw new Error(`${file}: apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization`);
  }
  let objects = [];
  for (const resource of k.resources ?? []) {
    const target = path.resolve(dir, resource);
    if (!fs.existsSync(target)) throw new Error(`${file}: resource ${resource} does not exist`);
    if (fs.statSync(target).isDirectory()) {
      objects.push(...kustomize(target));
    } else {
      if (!inside(dir, target)) {
        throw new Error(`${file}: file ${resource} is outside the kustomization's directory`);
      }
      objects.push(...readYaml(target));
    }
  }
  for (const generator of k.configMapGenerator ?? []) {
    const data = {};
    for (const entry of generator.files ?? []) {
      const [key, source] = entry.includes('=') ? entry.split('=', 2) : [path.basename(entry), entry];
      const target = path.resolve(dir, source);
      if (!inside(dir, target)) {
        throw new Error(`${file}: ${source} is outside the kustomization's directory (kustomize refuses it)`);
      }
      if (!fs.existsSync(target)) throw new Error(`${file}: ${source} does not exist`);
      if (key in data) throw new Error(`${file}: key ${key} twice in ${generator.name}`);
      data[key] = fs.readFileSync(target, 'utf8');
    }
    for (const literal of generator.literals ?? []) {
      const at = literal.indexOf('=');
      if (at <= 0) throw new Error(`${file}: literal "${literal}" is not KEY=VALUE`);
      data[literal.slice(0, at)] = literal.slice(at + 1);
    }
    const metadata = { name: generator.name };
    if (generator.options?.labels) metadata.labels = { ...generator.options.labels };
    objects.push({ apiVersion: 'v1', kind: 'ConfigMap', metadata, data });
  }
  for (const patch of k.patches ?? []) {
    const operations = patch.path
      ? readYaml(path.resolve(dir, patch.path))[0]
      : parseAll(patch.patch, `${file} patch`)[0];
    if (!Array.isArray(operations)) {
      throw new Error(`${file}: only JSON 6902 patches (a list of operations) are supported here`);
    }
    const t = patch.target ?? {};
    const matches = objects.filter((o) =>
      (!t.kind || o.kind === t.kind) &&
      (!t.name || o.metadata?.name === t.name) &&
      (!t.version || o.apiVersion.split('/').pop() === t.version) &&
      (t.group === undefined || (o.apiVersion.includes('/') ? o.apiVersion.split('/')[0] : '') === t.group));
    if (matches.length === 0) throw new Error(`${file}: patch target ${JSON.stringify(t)} matches nothing`);
    for (const o of matches) applyJsonPatch(o, operations);
  }
  if (k.namespace) {
    for (const o of objects) {
      if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
    }
  }
  for (const image of k.images ?? []) {
    for (const o of objects) {
      for (const spec of podSpecs(o)) {
        for (const c of allContainers(spec)) {
          const name = c.image.replace(/@.*$/, '').replace(/:[^/:]*$/, '');
          if (name !== image.name) continue;
          c.image = `${image.newName ?? name}${image.digest ? `@${image.digest}` : `:${image.newTag ?? 'latest'}`}`;
        }
      }
    }
  }
  return objects;
}

// ---------------------------------------------------------------------------
// Checks across the objects of one build.

function labelsMatch(selector, labels) {
  return Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
}

function referenceProblems(objects, where) {
  const problems = [];
  const byKind = (kind) => objects.filter((o) => o.kind === kind);
  const find = (kind, name, ns) =>
    objects.find((o) => o.kind === kind && o.metadata.name === name && (o.metadata.namespace ?? '') === (ns ?? ''));
  const keys = new Set();
  for (const o of objects) {
    const key = `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
    if (keys.has(key)) problems.push(`${describe(o)} is defined twice`);
    keys.add(key);
  }
  const workloads = objects.filter((o) => podTemplate(o));
  for (const w of workloads) {
    const ns = w.metadata.namespace;
    const template = podTemplate(w);
    const spec = template.spec;
    const labels = template.metadata?.labels ?? {};
    if (w.kind !== 'Job' && !labelsMatch(w.spec.selector?.matchLabels, labels)) {
      problems.push(`${describe(w)}: spec.selector does not match the pod template's labels`);
    }
    if (spec.securityContext?.runAsNonRoot !== true) {
      problems.push(`${describe(w)}: the pod does not set securityContext.runAsNonRoot: true`);
    }
    const volumeNames = new Set((spec.volumes ?? []).map((v) => v.name));
    for (const t of w.spec.volumeClaimTemplates ?? []) volumeNames.add(t.metadata.name);
    const mounted = new Set();
    for (const v of spec.volumes ?? []) {
      if (v.configMap) {
        const cm = find('ConfigMap', v.configMap.name, ns);
        if (!cm) problems.push(`${describe(w)}: volume ${v.name}: no ConfigMap ${v.configMap.name}`);
        for (const item of v.configMap.items ?? []) {
          if (cm && !(item.key in (cm.data ?? {}))) {
            problems.push(`${describe(w)}: volume ${v.name}: ConfigMap ${v.configMap.name} has no key ${item.key}`);
          }
        }
        if (v.configMap.defaultMode !== undefined && (v.configMap.defaultMode < 0 || v.configMap.defaultMode > 0o777)) {
          problems.push(`${describe(w)}: volume ${v.name}: defaultMode ${v.configMap.defaultMode} is not in 0..0777`);
        }
      }
      if (v.persistentVolumeClaim && !find('PersistentVolumeClaim', v.persistentVolumeClaim.claimName, ns)) {
        problems.push(`${describe(w)}: volume ${v.name}: no PersistentVolumeClaim ${v.persistentVolumeClaim.claimName}`);
      }
    }
    for (const c of allContainers(spec)) {
      const name = `${describe(w)} container ${c.name}`;
      for (const kind of ['requests', 'limits']) {
        for (const resource of ['cpu', 'memory']) {
          if (c.resources?.[kind]?.[resource] === undefined) problems.push(`${name}: no resources.${kind}.${resource}`);
        }
      }
      if (c.securityContext?.allowPrivilegeEscalation !== false) {
        problems.push(`${name}: securityContext.allowPrivilegeEscalation is not false`);
      }
      for (const m of c.volumeMounts ?? []) {
        if (!volumeNames.has(m.name)) problems.push(`${name}: volumeMount ${m.name} names no volume`);
        mounted.add(m.name);
      }
      const env = new Set((c.env ?? []).map((e) => e.name));
      for (const arg of [...(c.command ?? []), ...(c.args ?? [])]) {
        for (const [, variable] of String(arg).matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
          if (!env.has(variable)) problems.push(`${name}: $(${variable}) is not in its env (Kubernetes would leave it as is)`);
        }
      }
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.configMapKeyRef;
        if (!ref) continue;
        const cm = find('ConfigMap', ref.name, ns);
        if (!cm) problems.push(`${name}: env ${e.name}: no ConfigMap ${ref.name}`);
        else if (!(ref.key in (cm.data ?? {}))) problems.push(`${name}: env ${e.name}: ConfigMap ${ref.name} has no key ${ref.key}`);
      }
      const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
      if (ports.has('grpc')) {
        for (const probe of ['livenessProbe', 'readinessProbe']) {
          const port = c[probe]?.grpc?.port;
          if (port !== ports.get('grpc')) {
            problems.push(`${name}: ${probe} is not a gRPC health probe on its grpc port ${ports.get('grpc')} (got ${JSON.stringify(c[probe])})`);
          }
        }
      }
      const metricsPort = template.metadata?.annotations?.['prometheus.io/port'];
      if (metricsPort !== undefined && ports.has('metrics') && String(ports.get('metrics')) !== metricsPort) {
        problems.push(`${name}: prometheus.io/port ${metricsPort} is not its metrics port ${ports.get('metrics')}`);
      }
    }
    for (const v of volumeNames) {
      if (!mounted.has(v)) problems.push(`${describe(w)}: volume ${v} is mounted by no container`);
    }
  }
  for (const s of byKind('Service')) {
    const ns = s.metadata.namespace;
    const pods = workloads.filter((w) => (w.metadata.namespace ?? '') === (ns ?? '') &&
      labelsMatch(s.spec.selector, podTemplate(w).metadata?.labels));
    if (pods.length === 0) {
      problems.push(`${describe(s)}: its selector matches no pod template`);
      continue;
    }
    for (const p of s.spec.ports ?? []) {
      if (typeof p.targetPort !== 'string') continue;
      const named = pods.some((w) => allContainers(podTemplate(w).spec)
        .some((c) => (c.ports ?? []).some((cp) => cp.name === p.targetPort)));
      if (!named) problems.push(`${describe(s)}: port ${p.name}: no container port named ${p.targetPort}`);
    }
  }
  for (const sts of byKind('StatefulSet')) {
    const service = find('Service', sts.spec.serviceName, sts.metadata.namespace);
    if (!service) problems.push(`${describe(sts)}: serviceName ${sts.spec.serviceName}: no such Service`);
    else if (service.spec.clusterIP !== 'None') problems.push(`${describe(sts)}: Service ${sts.spec.serviceName} is not headless`);
    else if (!labelsMatch(service.spec.selector, sts.spec.template.metadata?.labels)) {
      problems.push(`${describe(sts)}: Service ${sts.spec.serviceName} does not select its pods`);
    }
  }
  if (problems.length === 0) ok(`${where}: references between the ${objects.length} objects resolve`);
  else notOk(`${where}: references between objects`, problems);
}

// Checks specific to this deployment: the job spec, the workers, the servers,
// and what Prometheus scrapes.
function deploymentProblems(objects, where, gpus) {
  const problems = [];
  const one = (kind, name) => objects.find((o) => o.kind === kind && o.metadata.name === name);
  const coordinator = one('Deployment', 'ps-coordinator');
  const servers = one('StatefulSet', 'ps-server');
  const workers = one('Job', 'ps-worker');
  const jobConfig = one('ConfigMap', 'ps-job');
  const promConfig = one('ConfigMap', 'ps-prometheus-config');
  const flags = (c) => Object.fromEntries((c.args ?? []).filter((a) => a.startsWith('--'))
    .map((a) => [a.slice(2).split('=')[0], a.includes('=') ? a.slice(a.indexOf('=') + 1) : 'true']));
  if (coordinator) {
    const c = coordinator.spec.template.spec.containers[0];
    const f = flags(c);
    if (coordinator.spec.replicas !== 1 || coordinator.spec.strategy?.type !== 'Recreate') {
      problems.push('ps-coordinator: one replica, replaced with strategy Recreate (it owns its RocksDB volume)');
    }
    if (!f.data_dir?.startsWith('/var/lib/ps/')) problems.push('ps-coordinator: --data_dir is not on its volume (/var/lib/ps)');
    if (f.metrics_host !== '0.0.0.0') problems.push('ps-coordinator: --metrics_host=0.0.0.0 is missing');
  }
  if (servers) {
    const c = servers.spec.template.spec.containers[0];
    const f = flags(c);
    if (!(servers.spec.volumeClaimTemplates ?? []).some((t) =>
      (c.volumeMounts ?? []).some((m) => m.name === t.metadata.name && f.data_dir?.startsWith(`${m.mountPath}/`)))) {
      problems.push('ps-server: --data_dir is not on a volumeClaimTemplate mount');
    }
    const expected = `$(POD_NAME).${servers.spec.serviceName}.$(POD_NAMESPACE).svc`;
    if (f.advertise_host !== expected) problems.push(`ps-server: --advertise_host must be ${expected} (its stable DNS name), got ${f.advertise_host}`);
    if (!/^0\.0\.0\.0:[1-9][0-9]*$/.test(f.listen ?? '')) problems.push('ps-server: --listen must be 0.0.0.0 on a fixed port');
    if (f.metrics_host !== '0.0.0.0') problems.push('ps-server: --metrics_host=0.0.0.0 is missing');
  }
  if (workers) {
    const spec = workers.spec.template.spec;
    const c = spec.containers[0];
    const gpu = c.resources?.limits?.['nvidia.com/gpu'];
    if (gpus && !(Number(gpu) >= 1)) problems.push('ps-worker Job: limits nvidia.com/gpu is not set');
    if (!gpus && gpu !== undefined) problems.push('ps-worker Job: asks for a GPU in the CPU overlay');
    if (!gpus && !(c.args ?? []).includes('--device=cpu')) problems.push('ps-worker Job: --device=cpu is missing in the CPU overlay');
    if (spec.restartPolicy !== 'OnFailure') problems.push('ps-worker Job: restartPolicy must be OnFailure (a crashed worker takes its place back)');
    if (workers.spec.completionMode !== 'Indexed' || spec.subdomain !== 'ps-worker') {
      problems.push('ps-worker Job: Indexed with subdomain ps-worker (pod DNS names for Prometheus)');
    }
  }
  if (jobConfig) {
    let job = null;
    try {
      job = JSON.parse(jobConfig.data['job.json']);
    } catch (error) {
      problems.push(`ConfigMap ps-job: job.json is not JSON: ${error.message}`);
    }
    if (job) {
      if (job.name !== jobConfig.data['job-name']) {
        problems.push(`ConfigMap ps-job: job-name "${jobConfig.data['job-name']}" is not job.json's name "${job.name}"`);
      }
      if (workers && (workers.spec.completions !== job.num_workers || workers.spec.parallelism !== job.num_workers)) {
        problems.push(`ps-worker Job: completions and parallelism must equal the job's num_workers (${job.num_workers})`);
      }
      if (servers && servers.spec.replicas < job.num_servers) {
        problems.push(`ps-server: ${servers.spec.replicas} replicas, the job needs ${job.num_servers}`);
      }
    }
  }
  if (promConfig) {
    for (const key of ['prometheus.yml', 'alerts.yml']) {
      if (!(key in (promConfig.data ?? {}))) problems.push(`ConfigMap ps-prometheus-config: no ${key}`);
    }
    const config = parseAll(promConfig.data['prometheus.yml'] ?? '', 'prometheus.yml', {})[0] ?? {};
    for (const job of config.scrape_configs ?? []) {
      for (const sd of job.dns_sd_configs ?? []) {
        for (const name of sd.names ?? []) {
          const m = /^_([a-z0-9-]+)\._tcp\.([a-z0-9-]+)$/.exec(name);
          const service = m && one('Service', m[2]);
          if (!service || !(service.spec.ports ?? []).some((p) => p.name === m[1])) {
            problems.push(`prometheus.yml job ${job.job_name}: ${name} is not a Service in this build with a port named ${m?.[1]}`);
          }
        }
      }
    }
  }
  if (problems.length === 0) ok(`${where}: coordinator, servers, workers, job spec and scrape targets fit together`);
  else notOk(`${where}: deployment checks`, problems);
}

// Maps names with kustomize's hash suffix back to the generated names.
function stripHashes(objects, generated) {
  let text = JSON.stringify(objects);
  for (const o of objects) {
    if (o.kind !== 'ConfigMap') continue;
    const m = /^(.*)-[a-z0-9]{10}$/.exec(o.metadata.name);
    if (m && generated.has(m[1])) text = text.split(`"${o.metadata.name}"`).join(`"${m[1]}"`);
  }
  return JSON.parse(text);
}

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]));
  }
  return value;
}

function findFiles(dir, test) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...findFiles(full, test));
    else if (test(entry.name)) out.push(full);
  }
  return out.sort();
}

async function validateObjects(objects, where) {
  const problems = [];
  for (const o of objects) {
    for (const p of await schemaProblems(o)) problems.push(`${describe(o)}: ${p}`);
  }
  if (problems.length === 0) ok(`${where}: ${objects.length} objects match the Kubernetes schemas`);
  else notOk(`${where}: schema validation`, problems);
}

async function checkK8s(source, rendered) {
  const root = path.join(source, 'deploy', 'k8s');
  // 1. Every manifest file, as written.
  const manifests = findFiles(root, (n) => /\.ya?ml$/.test(n) && !/^kustomization\.ya?ml$/.test(n));
  for (const file of manifests) {
    const relative = path.relative(source, file);
    let objects;
    try {
      objects = readYaml(file);
    } catch (error) {
      notOk(`${relative} parses`, [error.message]);
      continue;
    }
    await validateObjects(objects, relative);
  }
  // 2. Every kustomization, built.
  const dirs = findFiles(root, (n) => /^kustomization\.ya?ml$/.test(n)).map((f) => path.resolve(path.dirname(f)));
  for (const dir of dirs) {
    const relative = path.relative(source, dir);
    let objects;
    try {
      objects = kustomize(dir);
    } catch (error) {
      notOk(`${relative}: kustomization builds`, [error.message]);
      continue;
    }
    await validateObjects(objects, `${relative} (built)`);
    referenceProblems(objects, `${relative} (built)`);
    const complete = objects.some((o) => o.kind === 'StatefulSet');
    if (complete) deploymentProblems(objects, `${relative} (built)`, !relative.endsWith(path.join('overlays', 'cpu')));
    // 3. The real kustomize's output of the same directory.
    const output = rendered.get(dir);
    if (output) {
      let real;
      try {
        real = readYaml(output);
      } catch (error) {
        notOk(`kubectl kustomize ${relative}: output parses`, [error.message]);
        continue;
      }
      await validateObjects(real, `kubectl kustomize ${relative}`);
      const generated = new Set(objects.filter((o) => o.kind === 'ConfigMap').map((o) => o.metadata.name));
      const a = canonical(stripHashes(real, generated)).map((o) => JSON.stringify(o)).sort();
      const b = canonical(objects).map((o) => JSON.stringify(o)).sort();
      const differ = a.filter((x) => !b.includes(x)).map((x) => `kubectl only: ${x.slice(0, 300)}`)
        .concat(b.filter((x) => !a.includes(x)).map((x) => `this script only: ${x.slice(0, 300)}`));
      check(differ.length === 0, `kubectl kustomize ${relative} builds the same ${real.length} objects as this script`, differ);
    }
  }
  for (const [dir] of rendered) {
    if (!dirs.includes(dir)) notOk(`--rendered ${dir}: not a kustomization under deploy/k8s`);
  }
}

// ---------------------------------------------------------------------------
// docker-compose.yml

function flagsOf(command) {
  const out = {};
  for (const arg of command.slice(1)) {
    const m = /^--([a-z_]+)(?:=(.*))?$/.exec(arg);
    if (m) out[m[1]] = m[2] ?? 'true';
  }
  return out;
}

function checkCompose(source) {
  const deploy = path.join(source, 'deploy');
  const file = path.join(deploy, 'docker-compose.yml');
  let compose;
  try {
    [compose] = readYaml(file, { merge: true, uniqueKeys: true });
  } catch (error) {
    notOk('deploy/docker-compose.yml parses', [error.message]);
    return;
  }
  ok('deploy/docker-compose.yml parses');
  const services = compose.services ?? {};
  const expected = ['coordinator', 'server0', 'server1', 'worker0', 'worker1', 'prometheus', 'grafana'];
  check(expected.every((s) => s in services), `services: ${expected.join(', ')}`, [`got ${Object.keys(services).join(', ')}`]);
  const problems = [];
  const ps = {};
  for (const [name, s] of Object.entries(services)) {
    if (!s.ulimits?.nofile || !s.ulimits?.nproc) problems.push(`${name}: explicit ulimits nofile and nproc`);
    for (const v of s.volumes ?? []) {
      const [host] = v.split(':');
      if ((host.startsWith('./') || host.startsWith('../')) && !fs.existsSync(path.resolve(deploy, host))) {
        problems.push(`${name}: mounted ${host} does not exist`);
      }
      if (!host.startsWith('.') && !host.startsWith('/') && !(host in (compose.volumes ?? {}))) {
        problems.push(`${name}: volume ${host} is not declared`);
      }
    }
    const command = s.command;
    if (!Array.isArray(command) || !/^(ps-coordinator|ps-server|ps-worker)$/.test(command[0])) continue;
    const f = flagsOf(command);
    ps[name] = { kind: command[0], flags: f, service: s };
    if (f.metrics_host !== '0.0.0.0' || !/^[1-9][0-9]*$/.test(f.metrics_port ?? '')) {
      problems.push(`${name}: metrics on 0.0.0.0 and a fixed port`);
    }
    const listen = /^0\.0\.0\.0:([1-9][0-9]*)$/.exec(f.listen ?? '');
    if (!listen) problems.push(`${name}: --listen=0.0.0.0:PORT (a fixed port)`);
    const health = s.healthcheck?.test?.join(' ') ?? '';
    if (listen && !health.includes(`psctl health 127.0.0.1:${listen[1]}`)) {
      problems.push(`${name}: healthcheck must be psctl health 127.0.0.1:${listen?.[1]}`);
    }
    if (command[0] === 'ps-server') {
      if (f.advertise_host !== name) problems.push(`${name}: --advertise_host=${name} (its service name)`);
      const data = (s.volumes ?? []).find((v) => f.data_dir?.startsWith(`${v.split(':')[1]}/`));
      if (!data || !(data.split(':')[0] in (compose.volumes ?? {}))) {
        problems.push(`${name}: --data_dir on a named volume`);
      }
    }
    if (command[0] === 'ps-coordinator' && !(s.volumes ?? []).some((v) => f.data_dir?.startsWith(`${v.split(':')[1]}/`))) {
      problems.push(`${name}: --data_dir on a volume`);
    }
  }
  const coordinator = Object.entries(ps).find(([, p]) => p.kind === 'ps-coordinator');
  const coordinatorAddress = coordinator ? `${coordinator[0]}:${coordinator[1].flags.listen.split(':')[1]}` : null;
  for (const [name, p] of Object.entries(ps)) {
    if (p.kind !== 'ps-coordinator' && p.flags.coordinator !== coordinatorAddress) {
      problems.push(`${name}: --coordinator=${coordinatorAddress}`);
    }
  }
  const serverVolumes = Object.values(ps).filter((p) => p.kind === 'ps-server')
    .map((p) => (p.service.volumes ?? []).map((v) => v.split(':')[0]).join());
  if (new Set(serverVolumes).size !== serverVolumes.length) problems.push('servers: each has its own volume');
  check(problems.length === 0, 'compose services: fixed ports, advertised names, volumes, healthchecks, ulimits', problems);

  // Prometheus scrapes every process, under the job names the alerts use.
  const [prom] = readYaml(path.join(deploy, 'prometheus', 'prometheus.yml'), {});
  const targets = {};
  for (const job of prom.scrape_configs ?? []) {
    for (const sc of job.static_configs ?? []) for (const t of sc.targets ?? []) targets[t] = job.job_name;
  }
  const wanted = Object.entries(ps).map(([name, p]) => [`${name}:${p.flags.metrics_port}`, p.kind]);
  const missing = wanted.filter(([t, kind]) => targets[t] !== kind).map(([t, kind]) => `${t} in job ${kind}`);
  check(missing.length === 0, `prometheus.yml scrapes every process (${wanted.map(([t]) => t).join(', ')})`, missing);

  // Grafana: the data source is the compose Prometheus; the dashboards are where
  // the provider looks.
  const grafana = services.grafana ?? {};
  const [ds] = readYaml(path.join(deploy, 'grafana', 'provisioning', 'datasources', 'prometheus.yml'), {});
  const promListen = (services.prometheus?.command ?? []).find((a) => a.startsWith('--web.listen-address='));
  const promPort = promListen ? promListen.split(':').pop() : '9090';
  const dsProblems = [];
  if (ds.datasources?.[0]?.url !== `http://prometheus:${promPort}`) dsProblems.push(`data source url must be http://prometheus:${promPort}`);
  if (ds.datasources?.[0]?.uid !== 'prometheus') dsProblems.push('data source uid must be "prometheus" (the dashboard\'s default)');
  const [provider] = readYaml(path.join(deploy, 'grafana', 'provisioning', 'dashboards', 'paramserver.yml'), {});
  const dashboardsMount = (grafana.volumes ?? []).find((v) => v.startsWith('./grafana/dashboards:'));
  if (!dashboardsMount || dashboardsMount.split(':')[1] !== provider.providers?.[0]?.options?.path) {
    dsProblems.push('the dashboards provider path is where ./grafana/dashboards is mounted');
  }
  if (!(grafana.volumes ?? []).some((v) => v.startsWith('./grafana/provisioning:/etc/grafana/provisioning'))) {
    dsProblems.push('./grafana/provisioning is mounted at /etc/grafana/provisioning');
  }
  check(dsProblems.length === 0, 'Grafana provisioning: data source and dashboards provider match the compose file', dsProblems);
}

// ---------------------------------------------------------------------------
// Dashboard and alerts against the metric reference of docs/operations.md.

// The metric reference: rows "| `name` | type | ... |" of docs/operations.md.
function documentedMetrics(source) {
  const text = fs.readFileSync(path.join(source, 'docs', 'operations.md'), 'utf8');
  const metrics = new Map();
  for (const m of text.matchAll(/^\| `([a-z_:]+)` \| (counter|gauge|histogram|summary) \|/gm)) {
    metrics.set(m[1], m[2]);
  }
  return metrics;
}

function metricNames(expr) {
  const names = new Set();
  for (const [name] of expr.matchAll(/\bps_[a-z_]+\b/g)) {
    names.add(name.replace(/_(bucket|sum|count)$/, ''));
  }
  return names;
}

function checkDashboard(source) {
  const metrics = documentedMetrics(source);
  check(metrics.size >= 28, `docs/operations.md documents ${metrics.size} metrics`);
  const dir = path.join(source, 'deploy', 'grafana', 'dashboards');
  const required = ['ps_jobs', 'ps_worker_steps_total', 'ps_worker_loss', 'ps_worker_test_accuracy_ratio',
    'ps_rpc_received_bytes_total', 'ps_rpc_sent_bytes_total', 'ps_rpc_latency_seconds',
    'ps_pull_wait_seconds', 'ps_push_wait_seconds', 'ps_store_written_bytes_total',
    'ps_store_write_latency_seconds'];
  for (const file of findFiles(dir, (n) => n.endsWith('.json'))) {
    const relative = path.relative(source, file);
    let dashboard;
    try {
      dashboard = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (error) {
      notOk(`${relative} is JSON`, [error.message]);
      continue;
    }
    const problems = [];
    if (!dashboard.uid || !dashboard.title) problems.push('uid and title are required');
    const ids = new Set();
    const cells = new Map();
    const used = new Set();
    for (const p of dashboard.panels ?? []) {
      if (ids.has(p.id)) problems.push(`panel id ${p.id} twice`);
      ids.add(p.id);
      const g = p.gridPos ?? {};
      if (!(g.w > 0 && g.h > 0 && g.x >= 0 && g.y >= 0 && g.x + g.w <= 24)) problems.push(`${p.title}: bad gridPos`);
      for (let x = g.x; x < g.x + g.w; x++) {
        for (let y = g.y; y < g.y + g.h; y++) {
          if (cells.has(`${x},${y}`)) problems.push(`${p.title} overlaps ${cells.get(`${x},${y}`)}`);
          cells.set(`${x},${y}`, p.title);
        }
      }
      if (p.type === 'row') continue;
      if (p.datasource?.uid !== '${datasource}') problems.push(`${p.title}: data source must be \${datasource}`);
      if (!(p.targets ?? []).length) problems.push(`${p.title}: no query`);
      for (const t of p.targets ?? []) {
        if (!t.expr || !t.refId) problems.push(`${p.title}: a target without expr or refId`);
        for (const name of metricNames(t.expr ?? '')) {
          used.add(name);
          if (!metrics.has(name)) problems.push(`${p.title}: ${name} is not in the metric reference`);
        }
      }
    }
    const variable = (dashboard.templating?.list ?? []).find((v) => v.name === 'datasource');
    if (variable?.type !== 'datasource' || variable?.query !== 'prometheus') problems.push('a datasource variable of type prometheus');
    for (const name of required) if (!used.has(name)) problems.push(`no panel shows ${name}`);
    check(problems.length === 0, `${relative}: ${(dashboard.panels ?? []).length} panels, layout, data source, metrics documented`, problems);
  }
  const [rules] = readYaml(path.join(source, 'deploy', 'prometheus', 'alerts.yml'), {});
  const problems = [];
  const alerts = [];
  for (const group of rules.groups ?? []) {
    for (const rule of group.rules ?? []) {
      alerts.push(rule.alert);
      for (const name of metricNames(rule.expr ?? '')) {
        if (!metrics.has(name)) problems.push(`${rule.alert}: ${name} is not in the metric reference`);
      }
      if (!rule.labels?.severity) problems.push(`${rule.alert}: no severity label`);
      if (!rule.annotations?.summary || !rule.annotations?.description) problems.push(`${rule.alert}: summary and description`);
    }
  }
  const docs = fs.readFileSync(path.join(source, 'docs', 'operations.md'), 'utf8');
  for (const alert of alerts) if (!docs.includes(`\`${alert}\``)) problems.push(`${alert} is not explained in docs/operations.md`);
  check(problems.length === 0, `deploy/prometheus/alerts.yml: ${alerts.join(', ')} use documented metrics and are explained`, problems);
}

// ---------------------------------------------------------------------------
// Self-test of the schema validation.

async function selftest() {
  const good = () => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'x', labels: { 'app.kubernetes.io/name': 'x' } },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app: 'x' } },
      template: {
        metadata: { labels: { app: 'x' } },
        spec: {
          containers: [{
            name: 'c', image: 'i', ports: [{ name: 'grpc', containerPort: 7000 }],
            livenessProbe: { grpc: { port: 7000 } },
            resources: { limits: { cpu: '1', 'nvidia.com/gpu': 1 } },
          }],
        },
      },
    },
  });
  check((await schemaProblems(good())).length === 0, 'a valid Deployment passes', await schemaProblems(good()));
  const cases = [
    ['a string where an integer belongs (replicas: "two")', (d) => { d.spec.replicas = 'two'; }, /replicas: must be integer/],
    ['a missing required field (container name)', (d) => { delete d.spec.template.spec.containers[0].name; }, /name/],
    ['a missing required field (selector)', (d) => { delete d.spec.selector; }, /selector/],
    ['a gRPC probe on a named port (must be a number)', (d) => { d.spec.template.spec.containers[0].livenessProbe.grpc.port = 'grpc'; }, /port: must be integer/],
    ['an unknown field (livenessprobe)', (d) => { d.spec.template.spec.containers[0].livenessprobe = {}; }, /unknown field "livenessprobe"/],
    ['an unknown nested field (spec.template.spec.container)', (d) => { d.spec.template.spec.container = []; }, /unknown field "container"/],
    ['a wrong apiVersion (apps/v1beta1)', (d) => { d.apiVersion = 'apps/v1beta1'; }, /no published schema/],
  ];
  for (const [what, mutate, expected] of cases) {
    const d = good();
    mutate(d);
    const problems = await schemaProblems(d);
    check(problems.some((p) => expected.test(p)), `refused: ${what}`, problems.length ? problems : ['no problem found']);
  }
  const patched = good();
  let refused = false;
  try {
    applyJsonPatch(patched, [{ op: 'remove', path: '/spec/nothing' }]);
  } catch {
    refused = true;
  }
  check(refused, 'a JSON patch on a missing path is refused');
  const yaml11 = parseAll('mode: 0555\n', 'inline')[0];
  check(yaml11.mode === 0o555, 'YAML is read as Kubernetes reads it (YAML 1.1: 0555 is octal)');
}

// ---------------------------------------------------------------------------

const [command, source, ...rest] = process.argv.slice(2);
try {
  if (command === 'k8s' && source) {
    const rendered = new Map();
    for (let i = 0; i < rest.length; i++) {
      if (rest[i] !== '--rendered' || !rest[i + 1]?.includes('=')) throw new Error(`bad argument ${rest[i]}`);
      const [dir, file] = rest[++i].split('=');
      rendered.set(path.resolve(source, dir), file);
    }
    await checkK8s(source, rendered);
  } else if (command === 'compose' && source) {
    checkCompose(source);
  } else if (command === 'dashboard' && source) {
    checkDashboard(source);
  } else if (command === 'selftest') {
    await selftest();
  } else {
    console.error('usage: node validate.mjs k8s|compose|dashboard SOURCE_DIR [--rendered DIR=FILE ...] | selftest');
    process.exit(64);
  }
} catch (error) {
  notOk(`${command}: ${error.message}`, error.stack?.split('\n').slice(1, 4));
}
finish();
