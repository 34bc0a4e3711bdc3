{{- define "ws.name" -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}{{- end -}}
{{- define "ws.host" -}}{{ include "ws.name" . }}-host{{- end -}}
{{- define "ws.controller" -}}{{ include "ws.name" . }}-controller{{- end -}}
{{- define "ws.tlsSecret" -}}{{ include "ws.host" . }}-tls{{- end -}}
{{- define "ws.labels" -}}
app.kubernetes.io/name: workloadspread
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "ws.image" -}}{{ .image.repository }}:{{ .image.tag | default .appVersion }}{{- end -}}
{{- define "ws.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "ws.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}
{{- define "ws.settingsJson" -}}
{{- /* Kubewarden's policy-server has no counter capability: "auto" would probe it and log an
     error for every request, so the ClusterAdmissionPolicy says best-effort outright. */ -}}
{{- $mode := .Values.settings.mode -}}
{{- if and (eq .Values.mode "kubewarden") (eq $mode "auto") }}{{ $mode = "best-effort" }}{{ end -}}
{{- $s := dict "mode" $mode "conversionWebhook" (eq .Values.mode "bundled") "onLookupFailure" .Values.settings.onLookupFailure "rules" .Values.settings.rules "versionedStatusKinds" .Values.controller.versionedStatusKinds "customWorkloads" .Values.controller.customWorkloads -}}
{{- toJson $s -}}
{{- end -}}
{{- define "ws.webhookRules.pods" -}}
- apiGroups: [""]
  apiVersions: [v1]
  resources: [pods]
  operations: [CREATE, DELETE]
- apiGroups: [""]
  apiVersions: [v1]
  resources: [pods/eviction]
  operations: [CREATE]
{{- end -}}
{{- define "ws.webhookRules.workloadspreads" -}}
- apiGroups: [apps.kruise.io]
  apiVersions: [v1alpha1, v1beta1]
  resources: [workloadspreads]
  operations: [CREATE, UPDATE]
{{- end -}}
{{- define "ws.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ concat (list .Release.Namespace) .Values.webhook.excludeNamespaces | toJson }}
{{- end -}}
