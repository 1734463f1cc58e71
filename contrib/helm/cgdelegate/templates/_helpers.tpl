{{/*
cgdelegate.builtinConfig is the plugin's built-in defaults, in the order
contrib/config.yaml writes them. It orders the rendered config's keys and
tells whether the values' config is the defaults (for the header).
*/}}
{{- define "cgdelegate.builtinConfig" -}}
guard: enforce
maxDescendants: 250
maxDepth: 50
nodeMaxDelegatedCgroups: 10000
hookPath: /usr/local/bin/cgdelegate-hook
featureFile: /etc/kubernetes/node-feature-discovery/features.d/cgdelegate
statusFile: /run/cgdelegate/status.json
kubeletCPUManagerState: /var/lib/kubelet/cpu_manager_state
containerdConfig: /etc/containerd/config.toml
crioConfig: /etc/crio/crio.conf
crioConfigDir: /etc/crio/crio.conf.d
nodeLabel: auto
podEvents: auto
serviceAccountDir: /var/run/secrets/kubernetes.io/serviceaccount
{{- end }}

{{/*
cgdelegate.config is the config as a dict: the values' config, plus
metricsAddress when metrics.enabled.
*/}}
{{- define "cgdelegate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- if .Values.metrics.enabled -}}
{{- if hasKey $cfg "metricsAddress" -}}
{{- fail (printf "config.metricsAddress %q: leave it out with metrics.enabled, which sets it to \":%v\" from metrics.port" (toString (get $cfg "metricsAddress")) .Values.metrics.port) -}}
{{- end -}}
{{- if get $cfg "profiling" -}}
{{- fail (printf "config.profiling true with metrics.enabled: the profiles would be served on \":%v\", reachable from the pod network; profiling needs a loopback address: set metrics.enabled false and config.metricsAddress to 127.0.0.1:%v" .Values.metrics.port .Values.metrics.port) -}}
{{- end -}}
{{- $_ := set $cfg "metricsAddress" (printf ":%v" .Values.metrics.port) -}}
{{- end -}}
{{- if not .Values.events.enabled -}}
{{- $_ := set $cfg "podEvents" "off" -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end }}

{{/*
cgdelegate.configYAML is config.yaml: the built-in defaults' keys first, in
their order, then any other key sorted; with the defaults' header comment
when the config is the built-in defaults.
*/}}
{{- define "cgdelegate.configYAML" -}}
{{- $cfg := include "cgdelegate.config" . | fromJson -}}
{{- $builtin := include "cgdelegate.builtinConfig" . | fromYaml -}}
{{- $order := regexFindAll "(?m)^[A-Za-z0-9]+" (include "cgdelegate.builtinConfig" .) -1 -}}
{{- $lines := list -}}
{{- if eq (toJson $cfg) (toJson $builtin) -}}
{{- $lines = append $lines "# cgdelegate's default config: every key below is the built-in default, so" -}}
{{- $lines = append $lines "# this file changes nothing until you edit it. See docs/configuration.md." -}}
{{- $lines = append $lines "# `make install` puts it at /etc/cgdelegate/config.yaml (the path" -}}
{{- $lines = append $lines "# contrib/systemd/cgdelegate.service passes to -config), and" -}}
{{- $lines = append $lines "# contrib/kubernetes/configmap.yaml ships the same text." -}}
{{- else -}}
{{- $lines = append $lines "# cgdelegate's config, from the cgdelegate chart's values (config); a key" -}}
{{- $lines = append $lines "# not set here takes its built-in default. See docs/configuration.md." -}}
{{- end -}}
{{- range $k := $order -}}
{{- if hasKey $cfg $k -}}
{{- $lines = append $lines (toYaml (dict $k (get $cfg $k))) -}}
{{- end -}}
{{- end -}}
{{- range $k := keys $cfg | sortAlpha -}}
{{- if not (has $k $order) -}}
{{- $lines = append $lines (toYaml (dict $k (get $cfg $k))) -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end }}

{{/*
cgdelegate.laterDefaults are the defaults of the values the chart added
after its first version, as values.yaml has them
(integration/internal/manifests TestChartUpgradeWithOldValues keeps them
equal: each value left out renders as its default does). helm upgrade
--reuse-values renders the new chart with the old release's values in
place of the new defaults, which then lack these.
*/}}
{{- define "cgdelegate.laterDefaults" -}}
hostNetwork: false
resources:
  uninstall:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 64Mi}
  installProfiles:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 64Mi}
  installNRIConfig:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 64Mi}
runtimeConfig: {install: false, restart: true, runtime: auto}
engineProfiles: {seccomp: false, appArmor: false, kubeletRootDir: /var/lib/kubelet}
metrics:
  prometheusRule:
    enabled: false
    runbookURL: https://github.com/cgdelegate/cgdelegate/blob/main/docs/troubleshooting.md
    createContainerMilliseconds: 100
    delegatedCgroupsPercent: 90
    dyingNodeCgroups: 5000
  grafanaDashboard:
    enabled: false
    labels: {grafana_dashboard: "1"}
admissionPolicy:
  validationActions: [Deny]
placement: {enabled: true}
logLevel: info
nri: {plugin: {index: 50}}
updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
livenessProbe: {enabled: true, initialDelaySeconds: 30, periodSeconds: 30, failureThreshold: 3}
events: {enabled: true}
{{- end }}

{{/*
cgdelegate.fillDefaults adds to .Values every key of
cgdelegate.laterDefaults it lacks, at any depth, and changes no value it
has (as helm merges a release's values over the chart's defaults): every
template that reads one of them includes it first. It prints nothing.
*/}}
{{- define "cgdelegate.fillDefaults" -}}
{{- include "cgdelegate.fill" (dict "dst" .Values.AsMap "src" (include "cgdelegate.laterDefaults" . | fromYaml) "path" "") -}}
{{- end }}

{{/*
cgdelegate.fill adds .src's keys .dst lacks, into the maps both have but
the free-form ones (labels, a container's resources), which are values as
a whole: a key the user removed from them with null stays removed.
*/}}
{{- define "cgdelegate.fill" -}}
{{- $dst := .dst -}}
{{- $path := .path -}}
{{- $freeForm := list "resources.uninstall" "resources.installProfiles" "resources.installNRIConfig" "metrics.grafanaDashboard.labels" -}}
{{- range $k, $d := .src -}}
{{- $p := printf "%s%s" $path $k -}}
{{- if not (hasKey $dst $k) -}}
{{- $_ := set $dst $k (deepCopy $d) -}}
{{- else if and (kindIs "map" $d) (kindIs "map" (get $dst $k)) (not (has $p $freeForm)) -}}
{{- include "cgdelegate.fill" (dict "dst" (get $dst $k) "src" $d "path" (printf "%s." $p)) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
cgdelegate.fullname starts the name of every object the chart makes:
fullnameOverride when set; else the release name when it contains the
chart's name (nameOverride when set; the default release cgdelegate gives
the names the plain manifests use), else <release>-<name>; cut to 42
characters so that the longest name it starts
(<fullname>-node-label-uninstall, a Job's) fits in 63. The policies name
the service accounts by it (cgdelegate.serviceAccount), so an override
changes both together.
*/}}
{{- define "cgdelegate.fullname" -}}
{{- $name := .Release.Name -}}
{{- if .Values.fullnameOverride -}}
{{- $name = .Values.fullnameOverride -}}
{{- else -}}
{{- $chart := .Values.nameOverride | default .Chart.Name -}}
{{- if not (contains $chart .Release.Name) -}}
{{- $name = printf "%s-%s" .Release.Name $chart -}}
{{- end -}}
{{- end -}}
{{- $name | trunc 42 | trimSuffix "-" -}}
{{- end }}

{{/*
cgdelegate.selectorLabels select the plugin's pods (the DaemonSet's
selector, the metrics Service's). They name the chart only, whatever
nameOverride says: a DaemonSet's selector can not change, and one release
per cluster is all there is (cgdelegate.refuseSecondRelease).
*/}}
{{- define "cgdelegate.selectorLabels" -}}
{app.kubernetes.io/name: cgdelegate}
{{- end }}

{{/*
cgdelegate.labels are the labels every object carries: the recommended
ones (app.kubernetes.io/name, instance, version, managed-by and
helm.sh/chart). Not the pods' (cgdelegate.podLabels): a new chart version
must not change the pod template by itself.
*/}}
{{- define "cgdelegate.labels" -}}
{app.kubernetes.io/name: cgdelegate, app.kubernetes.io/instance: {{ .Release.Name | quote }}, app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}, app.kubernetes.io/managed-by: {{ .Release.Service | quote }}, helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}}
{{- end }}

{{/*
cgdelegate.podLabels are the plugin pods' labels: the selector's and the
release's, then the values' podLabels, which may not set either (the
DaemonSet's selector, and what NOTES.txt selects by).
*/}}
{{- define "cgdelegate.podLabels" -}}
{{- $own := dict "app.kubernetes.io/name" "cgdelegate" "app.kubernetes.io/instance" .Release.Name -}}
{{- $extra := .Values.podLabels | default dict -}}
{{- range $k := keys $extra | sortAlpha -}}
{{- if hasKey $own $k -}}
{{- fail (printf "podLabels.%s %q: the chart sets %s on the plugin's pods (the DaemonSet's selector or the release's label, which can not change); choose another key" $k (toString (get $extra $k)) $k) -}}
{{- end -}}
{{- end -}}
{{- toJson (merge (deepCopy $extra) $own) -}}
{{- end }}

{{/*
cgdelegate.refuseSecondRelease fails the install when a cgdelegate
DaemonSet of another release (or the plain manifests) already runs in the
cluster: two would both install the hook at the same hookPath, publish the
same feature and status files, register with NRI under the same plugin
name and own the same node label and cluster-wide policies. helm template
(no cluster) looks up nothing and renders.
*/}}
{{- define "cgdelegate.refuseSecondRelease" -}}
{{- $all := lookup "apps/v1" "DaemonSet" "" "" | default dict -}}
{{- range $ds := (get $all "items" | default list) -}}
{{- $labels := $ds.metadata.labels | default dict -}}
{{- if and (eq (get $labels "app.kubernetes.io/name" | toString) "cgdelegate") (or (ne $ds.metadata.namespace $.Release.Namespace) (ne $ds.metadata.name (include "cgdelegate.fullname" $))) -}}
{{- $owner := get ($ds.metadata.annotations | default dict) "meta.helm.sh/release-name" | default "none: applied without helm" -}}
{{- fail (printf "DaemonSet %s/%s (release %s) already runs cgdelegate in this cluster: one cgdelegate per cluster (two would install the same hook, files, NRI plugin name, node label and cluster-wide policies); upgrade that release, or uninstall it first" $ds.metadata.namespace $ds.metadata.name $owner) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
cgdelegate.hookPath is the config's hookPath: where the init container
installs the OCI hook on the node and where the plugin tells the runtime to
run it.
*/}}
{{- define "cgdelegate.hookPath" -}}
{{- (include "cgdelegate.config" . | fromJson).hookPath | default "/usr/local/bin/cgdelegate-hook" -}}
{{- end }}

{{/*
cgdelegate.image is the image every container runs: repository@digest
when image.digest is set (the tag is then ignored), else repository:tag.
*/}}
{{- define "cgdelegate.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{ $img.repository }}@{{ $img.digest }}
{{- else -}}
{{ $img.repository }}:{{ $img.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
cgdelegate.validationActions are the validationActions of the binding of
one of the pods' and the namespace label's policies: (list . "policy"),
the policy's name after the release's; admissionPolicy.validationActionsByPolicy
names the policy's own, admissionPolicy.validationActions the others'.
*/}}
{{- define "cgdelegate.validationActions" -}}
{{- $root := index . 0 -}}
{{- $policy := index . 1 -}}
{{- include "cgdelegate.fillDefaults" $root -}}
{{- $actions := $root.Values.admissionPolicy.validationActions -}}
{{- with $root.Values.admissionPolicy.validationActionsByPolicy -}}
{{- if hasKey . $policy -}}
{{- $actions = index . $policy -}}
{{- end -}}
{{- end -}}
{{- toJson $actions | replace "\"" "" | replace "," ", " -}}
{{- end }}

{{/* cgdelegate.serviceAccount is the user name of the plugin's token. */}}
{{- define "cgdelegate.serviceAccount" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "cgdelegate.fullname" . }}
{{- end }}

{{/*
cgdelegate.uninstallServiceAccount is the user name of the token of the
pre-delete Job that withdraws the node label (node-label-uninstall.yaml).
*/}}
{{- define "cgdelegate.uninstallServiceAccount" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "cgdelegate.fullname" . }}-uninstall
{{- end }}

{{/*
cgdelegate.uninstallHook are the annotations of a pre-delete hook of the
given weight (a string): replaced if left from an earlier try, deleted once
every hook succeeded, kept for its log when it failed.
*/}}
{{- define "cgdelegate.uninstallHook" -}}
{"helm.sh/hook": pre-delete, "helm.sh/hook-weight": {{ . | quote }}, "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}
{{- end }}

{{/*
cgdelegate.optInKeys is the CEL list of the pod's annotations that ask for a
writable cgroup; both writable-cgroups policies use it (cgdelegate.askVariables).
*/}}
{{- define "cgdelegate.optInKeys" -}}
has(object.metadata.annotations) ?
object.metadata.annotations.filter(k,
  (k in ['writable-cgroups.noderesource.dev',
         'writable-cgroups.noderesource.dev/pod',
         'cgroup2-mount-hierarchy-rw.crio.io',
         'io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw',
         'writable-cgroups.nri.io/enable']
   || k.startsWith('writable-cgroups.noderesource.dev/container.'))
  && !object.metadata.annotations[k].matches(r'^\s*(ReadOnly|false)\s*$')) :
[]
{{- end }}

{{/*
cgdelegate.askVariables are the first variables of both writable-cgroups
policies, identical in both (contrib/kubernetes/policy_test.go checks), as
a YAML list indented by the argument's indent:
  optInKeys: the annotations that ask (cgdelegate.optInKeys);
  writableRuntimeClass: the pod's spec.runtimeClassName when
    admissionPolicy.writableRuntimeClasses names it (a RuntimeClass whose
    handler makes containers writable: containerd's cgroup_writable), as a
    list of one; empty otherwise, and always with the value empty;
  askedBy: what asks, for the messages ('annotation k1, k2',
    'runtimeClassName c'); empty: the pod does not ask;
  stopAsking: how the pod would stop asking, for the messages.
*/}}
{{- define "cgdelegate.askVariables" -}}
- name: optInKeys
  expression: >-
    {{- include "cgdelegate.optInKeys" . | nindent 4 }}
- name: writableRuntimeClass
  expression: >-
{{- with .Values.admissionPolicy.writableRuntimeClasses }}
    has(object.spec.runtimeClassName) &&
    object.spec.runtimeClassName in {{ toJson . | replace "\"" "'" }} ?
    [object.spec.runtimeClassName] : []
{{- else }}
    []
{{- end }}
- name: askedBy
  expression: >-
    (variables.optInKeys.size() == 0 ? [] : ['annotation ' + variables.optInKeys.join(', ')]) +
    variables.writableRuntimeClass.map(c, 'runtimeClassName ' + c)
- name: stopAsking
  expression: >-
    variables.writableRuntimeClass.size() == 0 ? 'remove the annotation' :
    variables.optInKeys.size() == 0 ? 'use another runtime class' :
    'remove the annotation and use another runtime class'
{{- end }}

{{/*
cgdelegate.asks is the CEL condition that the pod (object) asks for a
writable cgroup: what the writable-cgroups policies judge. The placement
policy's match condition (placement-policy.yaml), where a policy's
variables are not available, so it is a condition of its own; keep it the
one definition of "asks" (contrib/kubernetes/placement_test.go checks
that it decides as the writable-cgroups policy's optInKeys). A pod naming
one of admissionPolicy.writableRuntimeClasses asks too, as in
cgdelegate.askVariables.
*/}}
{{- define "cgdelegate.asks" -}}
({{ include "cgdelegate.optInKeys" . }}).size() != 0
{{- with .Values.admissionPolicy.writableRuntimeClasses }} ||
(has(object.spec.runtimeClassName) && object.spec.runtimeClassName in {{ toJson . | replace "\"" "'" }})
{{- end }}
{{- end }}

{{/*
cgdelegate.sandboxKey is a CEL condition on an annotation key k: true for
every key the runtime and its NRI plugins read when they create a pod
sandbox and that decides whether the pod gets a writable cgroup or fails
closed: each opt-in key of cgdelegate.optInKeys, whatever its value, and
every scope of required-plugins.noderesource.dev and
tolerate-missing-plugins.cgdelegate.io.
*/}}
{{- define "cgdelegate.sandboxKey" -}}
k in ['writable-cgroups.noderesource.dev',
      'writable-cgroups.noderesource.dev/pod',
      'cgroup2-mount-hierarchy-rw.crio.io',
      'io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw',
      'writable-cgroups.nri.io/enable',
      'required-plugins.noderesource.dev',
      'required-plugins.noderesource.dev/pod',
      'tolerate-missing-plugins.cgdelegate.io',
      'tolerate-missing-plugins.cgdelegate.io/pod']
|| k.startsWith('writable-cgroups.noderesource.dev/container.')
|| k.startsWith('required-plugins.noderesource.dev/container.')
|| k.startsWith('tolerate-missing-plugins.cgdelegate.io/container.')
{{- end }}

{{/*
cgdelegate.sandboxKeysChanged is the CEL list of the cgdelegate.sandboxKey
annotations an UPDATE of a pod added, changed or removed; empty on CREATE.
*/}}
{{- define "cgdelegate.sandboxKeysChanged" -}}
request.operation != 'UPDATE' ? [] :
(has(object.metadata.annotations) ?
 object.metadata.annotations.filter(k, ({{ include "cgdelegate.sandboxKey" . | nindent 2 }}) &&
   !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations &&
     oldObject.metadata.annotations[k] == object.metadata.annotations[k])) :
 []) +
(has(oldObject.metadata.annotations) ?
 oldObject.metadata.annotations.filter(k, ({{ include "cgdelegate.sandboxKey" . | nindent 2 }}) &&
   !(has(object.metadata.annotations) && k in object.metadata.annotations)) :
 [])
{{- end }}

{{/*
cgdelegate.nodeMetadataChangedButAnnotations is the CEL list of the fields
of a Node's metadata, other than its labels and annotations (both node
policies compare those key by key), that an UPDATE changed, as
metadata.<field>: every field a client can write (name, uid,
creationTimestamp and deletionTimestamp the API server keeps;
resourceVersion and managedFields it writes itself).
*/}}
{{- define "cgdelegate.nodeMetadataChangedButAnnotations" -}}
(has(object.metadata.ownerReferences) == has(oldObject.metadata.ownerReferences) &&
 (!has(object.metadata.ownerReferences) || object.metadata.ownerReferences == oldObject.metadata.ownerReferences) ?
 [] : ['metadata.ownerReferences']) +
(has(object.metadata.finalizers) == has(oldObject.metadata.finalizers) &&
 (!has(object.metadata.finalizers) || object.metadata.finalizers == oldObject.metadata.finalizers) ?
 [] : ['metadata.finalizers']) +
(has(object.metadata.generateName) == has(oldObject.metadata.generateName) &&
 (!has(object.metadata.generateName) || object.metadata.generateName == oldObject.metadata.generateName) ?
 [] : ['metadata.generateName']) +
(has(object.metadata.deletionGracePeriodSeconds) == has(oldObject.metadata.deletionGracePeriodSeconds) &&
 (!has(object.metadata.deletionGracePeriodSeconds) || object.metadata.deletionGracePeriodSeconds == oldObject.metadata.deletionGracePeriodSeconds) ?
 [] : ['metadata.deletionGracePeriodSeconds'])
{{- end }}

{{/*
cgdelegate.usesEngineProfile is the CEL condition that the securityContext
of the object (a pod's spec, or a container) named by the argument names
either engine profile: the AppArmor profile cgdelegate-engines or the
seccomp profile cgdelegate/engines.json (also written with ./ or doubled
slashes: the kubelet cleans the path it joins to its seccomp directory).
localhostProfile is set only with type Localhost (API validation).
*/}}
{{- define "cgdelegate.usesEngineProfile" -}}
(has({{ . }}.securityContext) &&
 ((has({{ . }}.securityContext.appArmorProfile) && has({{ . }}.securityContext.appArmorProfile.localhostProfile) &&
   {{ . }}.securityContext.appArmorProfile.localhostProfile == 'cgdelegate-engines') ||
  (has({{ . }}.securityContext.seccompProfile) && has({{ . }}.securityContext.seccompProfile.localhostProfile) &&
   {{ . }}.securityContext.seccompProfile.localhostProfile.matches(r'^(\./+)*cgdelegate(/+\.)*/+engines\.json$'))))
{{- end }}

{{/*
cgdelegate.engineProfileUsers is the CEL list of what, in the pod named by
the argument (object or oldObject), uses an engine profile: the pod's
securityContext, each container, init container and ephemeral container
by name, and each deprecated AppArmor annotation naming cgdelegate-engines.
*/}}
{{- define "cgdelegate.engineProfileUsers" -}}
({{ include "cgdelegate.usesEngineProfile" (printf "%s.spec" .) }} ? ['the pod securityContext'] : []) +
{{ . }}.spec.containers.filter(c, {{ include "cgdelegate.usesEngineProfile" "c" }}).map(c, 'container ' + c.name) +
(has({{ . }}.spec.initContainers) ?
 {{ . }}.spec.initContainers.filter(c, {{ include "cgdelegate.usesEngineProfile" "c" }}).map(c, 'init container ' + c.name) : []) +
(has({{ . }}.spec.ephemeralContainers) ?
 {{ . }}.spec.ephemeralContainers.filter(c, {{ include "cgdelegate.usesEngineProfile" "c" }}).map(c, 'ephemeral container ' + c.name) : []) +
(has({{ . }}.metadata.annotations) ?
 {{ . }}.metadata.annotations.filter(k, k.startsWith('container.apparmor.security.beta.kubernetes.io/') &&
   {{ . }}.metadata.annotations[k] == 'localhost/cgdelegate-engines').map(k, 'annotation ' + k) : [])
{{- end }}
