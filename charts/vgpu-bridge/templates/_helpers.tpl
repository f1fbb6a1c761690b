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

{{- define "vgpu-bridge.webhookName" -}}{{ include "vgpu-bridge.fullname" . | trunc 55 | trimSuffix "-" }}-webhook{{- end -}}
{{- define "vgpu-bridge.agentName" -}}{{ include "vgpu-bridge.fullname" . | trunc 57 | trimSuffix "-" }}-agent{{- end -}}
{{- define "vgpu-bridge.tlsSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}{{ .Values.tls.secretName }}{{- else -}}{{ include "vgpu-bridge.webhookName" . }}-tls{{- end -}}
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

{{- define "vgpu-bridge.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{ .image.repository }}:{{ $tag }}
{{- end -}}

{{/* Comma list for one env var. */}}
{{- define "vgpu-bridge.commaList" -}}{{ join "," . }}{{- end -}}

{{/* Namespaces the webhook never mutates: the configured ones and our own. */}}
{{- define "vgpu-bridge.excludedNamespaces" -}}
{{- $all := concat .Values.webhook.excludedNamespaces (list .Release.Namespace) | uniq -}}
{{ join "," $all }}
{{- end -}}

{{- define "vgpu-bridge.restrictedSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
