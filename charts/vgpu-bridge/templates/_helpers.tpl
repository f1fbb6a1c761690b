{{/* Names. */}}
{{- define "vgpu-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vgpu-bridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The DRA driver's name: the agent publishes under it, the webhook's claims ask for it, and its
DeviceClass carries it. One value for all three. */}}
{{- define "vgpu-bridge.driver" -}}{{ .Values.driverName }}{{- end -}}

{{/* NVIDIA's DRA driver mode (nvidiaDriver.enabled, docs/nvidia-driver.md): its driver and
DeviceClass, the driver our agents register as (the enforcer's there: they publish no GPU, only
one enforcer device per node; driverName elsewhere), and the webhook's profile (nvidia there). */}}
{{- define "vgpu-bridge.nvidiaClass" -}}gpu.nvidia.com{{- end -}}
{{- define "vgpu-bridge.agentDriver" -}}
{{- if .Values.nvidiaDriver.enabled }}{{ .Values.nvidiaDriver.enforcerDriver }}{{ else }}{{ include "vgpu-bridge.driver" . }}{{ end -}}
{{- end -}}
{{- define "vgpu-bridge.profile" -}}
{{- if .Values.nvidiaDriver.enabled }}nvidia{{ else }}{{ .Values.webhook.settings.profile }}{{ end -}}
{{- end -}}

{{- define "vgpu-bridge.webhookName" -}}{{ include "vgpu-bridge.fullname" . | trunc 55 | trimSuffix "-" }}-webhook{{- end -}}
{{- define "vgpu-bridge.agentName" -}}{{ include "vgpu-bridge.fullname" . | trunc 57 | trimSuffix "-" }}-agent{{- end -}}
{{- define "vgpu-bridge.tlsSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}{{ .Values.tls.secretName }}
{{- else if eq .Values.tls.mode "self-managed" -}}{{ include "vgpu-bridge.webhookName" . }}-cert
{{- else -}}{{ include "vgpu-bridge.webhookName" . }}-tls{{- end -}}
{{- end -}}
{{- define "vgpu-bridge.configurationName" -}}
{{- .Values.webhook.configurationName | default (printf "gpu-sharing-%s" (include "vgpu-bridge.fullname" .)) -}}
{{- end -}}

{{/* Labels. */}}
{{- define "vgpu-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "vgpu-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "vgpu-bridge.selector" -}}
app.kubernetes.io/name: {{ include "vgpu-bridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* One image reference: (dict "root" . "part" "webhook"|"agent"). <registry>/<repository>, then
@<digest> when the part has one (a digest wins over the tag), else :<tag> (default appVersion). */}}
{{- define "vgpu-bridge.image" -}}
{{- $image := .root.Values.image -}}
{{- $part := get $image .part -}}
{{- $repository := $part.repository -}}
{{- with $image.registry }}{{ $repository = printf "%s/%s" . $repository }}{{ end -}}
{{- if $part.digest -}}
{{ $repository }}@{{ $part.digest }}
{{- else -}}
{{ $repository }}:{{ $image.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Service-account names: the one the chart makes (<fullname>-webhook / -agent) unless `name`
is set; validation.yaml refuses create=false without a name. Every binding and policy uses these. */}}
{{- define "vgpu-bridge.webhookServiceAccount" -}}
{{- .Values.webhook.serviceAccount.name | default (include "vgpu-bridge.webhookName" .) -}}
{{- end -}}
{{- define "vgpu-bridge.agentServiceAccount" -}}
{{- .Values.agent.serviceAccount.name | default (include "vgpu-bridge.agentName" .) -}}
{{- end -}}

{{/* A pod template's labels: the user's podLabels, then the selector's (which win). */}}
{{- define "vgpu-bridge.podLabels" -}}
{{- $selector := include "vgpu-bridge.selector" . | fromYaml -}}
{{- toYaml (merge $selector (deepCopy (.labels | default dict))) -}}
{{- end -}}

{{/* The host directory of the NVIDIA driver the agent reads and puts into claims: gpuOperator's
when that is on, else agent.driverRoot; "" with mock GPUs (agent.mockGpus or agent.mock.enabled)
and under nvidiaDriver (nothing of a driver is read then: NVIDIA's kubelet plugin puts the driver
into its own CDI spec). */}}
{{- define "vgpu-bridge.driverRoot" -}}
{{- $a := .Values.agent -}}
{{- if not (or $a.mockGpus $a.mock.enabled .Values.nvidiaDriver.enabled) -}}
{{- if $a.gpuOperator.enabled }}{{ $a.gpuOperator.driverRoot }}{{ else }}{{ $a.driverRoot }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* The label naming each node's mock cards (agent.mock.enabled without agent.mockGpus); "" when
the cards are not from a label. */}}
{{- define "vgpu-bridge.mockNodeLabel" -}}
{{- $a := .Values.agent -}}
{{- if and $a.mock.enabled (not $a.mockGpus) }}{{ $a.mock.nodeLabel }}{{ end -}}
{{- end -}}

{{/* The agent's required node-affinity terms as YAML (ORed): with agent.mock.enabled, the nodes
that have agent.mock.nodeLabel; else one per agent.gpuNodeLabels entry (that label "true"), each ANDed under
gpuOperator (devicePluginOff nodeLabel) with the Operator's device-plugin label "false"; "" when
nothing restricts the nodes. */}}
{{- define "vgpu-bridge.agentNodeTerms" -}}
{{- $a := .Values.agent -}}
{{- if $a.mock.enabled }}
{{- toYaml (list (dict "matchExpressions" (list (dict "key" $a.mock.nodeLabel "operator" "Exists")))) }}
{{- else -}}
{{- $operator := list -}}
{{- if and $a.gpuOperator.enabled (eq $a.gpuOperator.devicePluginOff "nodeLabel") -}}
{{- $operator = list (dict "key" "nvidia.com/gpu.deploy.device-plugin" "operator" "In" "values" (list "false")) -}}
{{- end -}}
{{- $terms := list -}}
{{- range $a.gpuNodeLabels -}}
{{- $terms = append $terms (dict "matchExpressions" (prepend $operator (dict "key" . "operator" "In" "values" (list "true")))) -}}
{{- end -}}
{{- if and (not $terms) $operator -}}
{{- $terms = list (dict "matchExpressions" $operator) -}}
{{- end -}}
{{- with $terms }}{{ toYaml . }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* Comma list for one env var. */}}
{{- define "vgpu-bridge.commaList" -}}{{ join "," . }}{{- end -}}

{{/* Namespaces the webhook never mutates: the configured ones and our own. */}}
{{- define "vgpu-bridge.excludedNamespaces" -}}
{{- $all := concat .Values.webhook.excludedNamespaces (list .Release.Namespace) | uniq -}}
{{ join "," $all }}
{{- end -}}

{{/* A list of strings as one CEL list literal of string literals (single-quoted, backslashes and
quotes escaped): `include "vgpu-bridge.celList" $list` renders ['a', 'b']. Values never reach CEL
unquoted. */}}
{{- define "vgpu-bridge.celList" -}}
{{- $literals := list -}}
{{- range . -}}
{{- $literals = append $literals (printf "'%s'" (toString . | replace "\\" "\\\\" | replace "'" "\\'")) -}}
{{- end -}}
{{- printf "[%s]" (join ", " $literals) -}}
{{- end -}}
