{{/* Names: the release name alone when it already says kvscope, else "<release>-kvscope". */}}
{{- define "kvscope.fullname" -}}
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

{{/* Selector labels of one component: (dict "ctx" $ "component" "exporter"). */}}
{{- define "kvscope.selectorLabels" -}}
app.kubernetes.io/name: {{ default .ctx.Chart.Name .ctx.Values.nameOverride }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects: the selector labels plus version and chart. */}}
{{- define "kvscope.labels" -}}
{{ include "kvscope.selectorLabels" . }}
app.kubernetes.io/part-of: kvscope
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}: the digest wins when set. */}}
{{- define "kvscope.image" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* Container securityContext of every kvscope container: non-root, nothing writable but
     the emptyDirs, no privilege escalation, no capabilities (Pod Security "restricted"). */}}
{{- define "kvscope.securityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The exporter container; (dict "ctx" $ "targets" (list "NAME=URL" ...)). Its /tmp is the
     emptyDir volume "kvscope-tmp" that the pod must declare. */}}
{{- define "kvscope.exporterContainer" -}}
{{- $v := .ctx.Values.exporter -}}
- name: kvscope-exporter
  image: {{ include "kvscope.image" .ctx.Values.images.exporter }}
  imagePullPolicy: {{ .ctx.Values.images.exporter.pullPolicy }}
  args:
    # 0.0.0.0 inside the pod; the pod is reached only through ClusterIP Services.
    - --listen=0.0.0.0:{{ $v.port }}
    - --interval={{ $v.interval }}
    - --window={{ $v.window }}
    {{- range .targets }}
    - --target={{ . }}
    {{- end }}
    {{- range $v.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    # The `target` label of a sidecar's series is its pod's name, so replicas stay apart.
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
  ports:
    - name: kvscope
      containerPort: {{ $v.port }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /healthz
      port: kvscope
    periodSeconds: 10
    timeoutSeconds: 2
  livenessProbe:
    httpGet:
      path: /healthz
      port: kvscope
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 2
    failureThreshold: 3
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- include "kvscope.securityContext" . | nindent 4 }}
  volumeMounts:
    - name: kvscope-tmp
      mountPath: /tmp
{{- end -}}

{{/* The emptyDir behind the exporter's /tmp. */}}
{{- define "kvscope.exporterVolume" -}}
- name: kvscope-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}

{{/* The load test's target URL: loadtest.target, else the example server's Service. */}}
{{- define "kvscope.loadtestTarget" -}}
{{- if .Values.loadtest.target -}}
{{- .Values.loadtest.target -}}
{{- else if .Values.example.enabled -}}
{{- printf "http://%s-%s:%v" (include "kvscope.fullname" .) .Values.example.server.name .Values.example.server.port -}}
{{- else -}}
{{- fail "loadtest.enabled needs loadtest.target (an OpenAI-compatible server URL) or example.enabled" -}}
{{- end -}}
{{- end -}}
