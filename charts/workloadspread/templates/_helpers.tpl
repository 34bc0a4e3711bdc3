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
{{- /* repository:tag, repository@digest, or repository:tag@digest (image.digest pins it). */ -}}
{{- define "ws.image" -}}
{{- $tag := .image.tag | default .appVersion -}}
{{- if .image.digest -}}
{{- if not (hasPrefix "sha256:" .image.digest) }}{{ fail (printf "image.digest %q must be sha256:<64 hex digits>" .image.digest) }}{{ end -}}
{{ .image.repository }}{{ if .image.tag }}:{{ .image.tag }}{{ end }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}
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
{{- /* customWorkloads as the policy and the controller read them (without the chart-only
     `resource` names, which only RBAC needs). */ -}}
{{- define "ws.customWorkloads" -}}
{{- $out := list -}}
{{- range .Values.controller.customWorkloads -}}
{{- $subs := list -}}
{{- range .subResources }}{{ $subs = append $subs (dict "group" .group "kind" .kind) }}{{ end -}}
{{- $w := dict "group" .group "kind" .kind "replicasPath" (.replicasPath | default "") -}}
{{- if $subs }}{{ $_ := set $w "subResources" $subs }}{{ end -}}
{{- $out = append $out $w -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
{{- /* Read access to each custom workload kind and to the owner kinds between it and its
     pods: exactly the named resources (the plural is `resource`, default kind + "s"). */ -}}
{{- define "ws.customWorkloadRules" -}}
{{- range .Values.controller.customWorkloads }}
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .resource | default (printf "%ss" (lower .kind)) | quote }}]
  verbs: [get, list, watch]
{{- range .subResources }}
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .resource | default (printf "%ss" (lower .kind)) | quote }}]
  verbs: [get, list, watch]
{{- end }}
{{- end }}
{{- end -}}
{{- define "ws.settingsJson" -}}
{{- /* Kubewarden's policy-server has no counter capability: "auto" would probe it and log an
     error for every request, so the ClusterAdmissionPolicy says best-effort outright. */ -}}
{{- $mode := .Values.settings.mode -}}
{{- if and (eq .Values.mode "kubewarden") (eq $mode "auto") }}{{ $mode = "best-effort" }}{{ end -}}
{{- /* The bundled host answers field selectors from its cache: WorkloadSpreads are found by
     their target's name (cost independent of how many a namespace holds). policy-server
     would keep a reflector per name: there, the one masked list. */ -}}
{{- $lookup := ternary "target-name" "list" (eq .Values.mode "bundled") -}}
{{- $s := dict "mode" $mode "spreadLookup" $lookup "conversionWebhook" (eq .Values.mode "bundled") "onLookupFailure" .Values.settings.onLookupFailure "rules" .Values.settings.rules "versionedStatusKinds" .Values.controller.versionedStatusKinds "customWorkloads" (include "ws.customWorkloads" . | fromJsonArray) -}}
{{- toJson $s -}}
{{- end -}}
{{- define "ws.webhookRules.pods" -}}
- apiGroups: [""]
  apiVersions: [v1]
  resources: [pods]
  operations: [CREATE, DELETE]
{{- end -}}
{{- define "ws.webhookRules.evictions" -}}
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
{{- /* Only requests that can concern a WorkloadSpread reach the webhook (issue #30): a pod
     created with a controller that is not a DaemonSet (WorkloadSpreads target workloads;
     DaemonSet pods — CNI, cert-manager — must start while the host is down), and the
     deletion of a pod carrying the matched annotation that is neither terminating nor
     terminal (issue #41: the policy releases nothing for those — its slot was released
     when its deletion began, or is freed by the controller's recount — and with the host
     down they would stay Terminating and hold up namespace deletion). Other requests (evictions,
     WorkloadSpreads) pass both conditions. An empty field is absent in CEL (has()), and an
     expression that errors fails the request under failurePolicy Fail. */ -}}
{{- /* The webhooks the host writes into the configurations once it serves them
     (templates/webhooks.yaml); one list per configuration. A webhook is added here (a pod
     UPDATE rule, say) by adding its entry: the host writes whatever this renders. */ -}}
{{- define "ws.webhookDefinitions" -}}
mutating:
- name: pods.workloadspread.io
  clientConfig:
    service: {name: {{ include "ws.host" . }}, namespace: {{ .Release.Namespace }}, path: /mutate, port: 443}
  rules: {{- include "ws.webhookRules.pods" . | nindent 2 }}
  {{- include "ws.namespaceSelector" . | nindent 2 }}
  {{- include "ws.matchConditions" . | nindent 2 }}
  failurePolicy: {{ .Values.webhook.failurePolicy }}
  # Claims and releases write WorkloadSpread status; dry runs write nothing.
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1]
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
  # Called again when a later mutating webhook changed the pod: the host answers with the
  # subset it chose the first time, injected again, and claims nothing (webhook/reinvoke.rs).
  reinvocationPolicy: IfNeeded
# An Eviction does not carry its pod, so no condition can tell a spread pod's from any
# other: evictions get their own failure policy (a missed release frees the slot late,
# when the controller recounts — never early), so draining a node works while the host is down.
- name: evictions.workloadspread.io
  clientConfig:
    service: {name: {{ include "ws.host" . }}, namespace: {{ .Release.Namespace }}, path: /mutate, port: 443}
  rules: {{- include "ws.webhookRules.evictions" . | nindent 2 }}
  {{- include "ws.namespaceSelector" . | nindent 2 }}
  failurePolicy: {{ .Values.webhook.evictionFailurePolicy }}
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1]
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
validating:
- name: workloadspreads.workloadspread.io
  clientConfig:
    service: {name: {{ include "ws.host" . }}, namespace: {{ .Release.Namespace }}, path: /validate, port: 443}
  rules: {{- include "ws.webhookRules.workloadspreads" . | nindent 2 }}
  {{- include "ws.namespaceSelector" . | nindent 2 }}
  failurePolicy: {{ .Values.webhook.failurePolicy }}
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- end -}}
{{- define "ws.matchConditions" -}}
matchConditions:
- name: pod-create-with-a-workload-controller
  expression: >-
    !(request.resource.group == '' && request.resource.resource == 'pods' &&
    (!has(request.subResource) || request.subResource == '') && request.operation == 'CREATE') ||
    (has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r,
    has(r.controller) && r.controller == true && r.kind != 'DaemonSet'))
- name: pod-delete-of-a-matched-pod
  expression: >-
    !(request.resource.group == '' && request.resource.resource == 'pods' &&
    (!has(request.subResource) || request.subResource == '') && request.operation == 'DELETE') ||
    (has(oldObject.metadata.annotations) &&
    'apps.kruise.io/matched-workloadspread' in oldObject.metadata.annotations)
- name: pod-delete-of-a-live-pod
  expression: >-
    !(request.resource.group == '' && request.resource.resource == 'pods' &&
    (!has(request.subResource) || request.subResource == '') && request.operation == 'DELETE') ||
    !(has(oldObject.metadata.deletionTimestamp) || (has(oldObject.status) &&
    has(oldObject.status.phase) && oldObject.status.phase in ['Succeeded', 'Failed']))
{{- end -}}
{{- /* Never the release namespace nor webhook.excludeNamespaces (nor Kubewarden's own
     namespace in mode kubewarden); webhook.namespaceSelector narrows it further (opt-in by
     label). */ -}}
{{- define "ws.namespaceSelector" -}}
{{- $excluded := concat (list .Release.Namespace) .Values.webhook.excludeNamespaces -}}
{{- if eq .Values.mode "kubewarden" }}{{ $excluded = append $excluded .Values.kubewarden.namespace }}{{ end -}}
{{- $sel := .Values.webhook.namespaceSelector | default dict -}}
namespaceSelector:
  {{- with $sel.matchLabels }}
  matchLabels: {{- toYaml . | nindent 4 }}
  {{- end }}
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ $excluded | uniq | toJson }}
  {{- with $sel.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}
{{- define "ws.podWriteVerbs" -}}
patch{{ if .Values.controller.podWrite.rescheduling }}, delete{{ end }}
{{- end -}}
{{- /* The pod Event (reason, reporter) pairs the controller reads as capacity signals, as
     JSON [[reason, reporter], ...] ("" reporter: any): its default rules (the same list as
     core::controller::capacity::default_rules, checked by a test there) and
     controller.capacity.extraSignals ("REASON[@SOURCE]=meaning"). */ -}}
{{- define "ws.capacitySignalRules" -}}
{{- $rules := list (list "NotTriggerScaleUp" "cluster-autoscaler") (list "FailedScaleUp" "cluster-autoscaler") (list "TriggeredScaleUp" "cluster-autoscaler") (list "FailedScheduling" "karpenter") (list "Nominated" "karpenter") -}}
{{- range .Values.controller.capacity.extraSignals -}}
{{- $left := index (regexSplit "=" . 2) 0 -}}
{{- $parts := regexSplit "@" $left 2 -}}
{{- $rules = append $rules (list (index $parts 0) (ternary (last $parts) "" (gt (len $parts) 1))) -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}
