{{/* Every object's labels: the kustomize base's part-of, and Helm's own. */}}
{{- define "nri-podlevel.labels" -}}
app.kubernetes.io/part-of: nri-podlevel
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "nri-podlevel.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* An agent's DaemonSet and ConfigMap, from (dict "root" $ "name" NAME "component" C "pool" POOL "config" CONFIG):
     the default agent (no pool) or a node pool's, named as deploy/pools names them. */}}
{{- define "nri-podlevel.agent" -}}
{{- $root := .root }}
{{- $values := $root.Values }}
{{- $selector := dict "app.kubernetes.io/name" "nri-podlevel" "app.kubernetes.io/component" .component }}
{{- if .pool }}{{ $_ := set $selector "app.kubernetes.io/instance" (printf "pool-%s" .pool) }}{{ end }}
{{- $labels := merge (dict) $selector (include "nri-podlevel.labels" $root | fromYaml) }}
{{- $objectLabels := include "nri-podlevel.labels" $root | fromYaml }}
{{- if .pool }}
{{- $objectLabels = merge (dict "app.kubernetes.io/component" .component "app.kubernetes.io/instance" (printf "pool-%s" .pool)) $objectLabels }}
{{- end }}
{{- $configName := ternary (printf "nri-podlevel-config-%s" .pool) "nri-podlevel-config" (not (empty .pool)) }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $objectLabels | nindent 4 }}
# It reads nothing from the API server: everything comes from the runtime over NRI.
automountServiceAccountToken: false
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $labels | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
  # One node at a time, the old agent gone before the new one starts: two agents on one node are two owners
  # of its CPUs.
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1, maxSurge: 0}
  template:
    metadata:
      labels:
        {{- toYaml $selector | nindent 8 }}
      annotations:
        # A changed configuration rolls the agents, as kustomize's hashed ConfigMap name does.
        nri-podlevel.io/config-checksum: {{ .config | toYaml | sha256sum }}
    spec:
      serviceAccountName: {{ .name }}
      automountServiceAccountToken: false
      nodeSelector:
        {{- toYaml $values.agent.nodeSelector | nindent 8 }}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            {{- if .pool }}
            - matchExpressions: [{key: nri-podlevel.io/pool, operator: In, values: [{{ .pool }}]}]
            {{- else }}
            - matchExpressions: [{key: nri-podlevel.io/pool, operator: DoesNotExist}]
            {{- end }}
      {{- with $values.agent.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: 5
      tolerations:
        {{- toYaml $values.agent.tolerations | nindent 8 }}
      securityContext:
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: nri-podlevel
        image: {{ include "nri-podlevel.image" $root }}
        imagePullPolicy: {{ $values.image.pullPolicy }}
        args:
        - run
        - --config=/etc/nri-podlevel/config.yaml
        - --nri-socket=/var/run/nri/nri.sock
        - --sysfs-root=/host/sys
        - --cgroup-root=/host/cgroup
        - --state-dir=/var/lib/nri-podlevel
        - --podresources-socket=/run/nri-podlevel/pod-resources.sock
        - --metrics-address=0.0.0.0:{{ $values.agent.metricsPort }}
        - --on-missing-mount=wait
        ports:
        - {name: metrics, containerPort: {{ $values.agent.metricsPort }}}
        startupProbe:
          httpGet: {path: /healthz, port: metrics}
          periodSeconds: 5
          timeoutSeconds: 5
          failureThreshold: 60
        livenessProbe:
          httpGet: {path: /healthz, port: metrics}
          periodSeconds: 10
          timeoutSeconds: 5
          failureThreshold: 3
        readinessProbe:
          httpGet: {path: /readyz, port: metrics}
          periodSeconds: 5
          timeoutSeconds: 3
        resources:
          {{- toYaml $values.agent.resources | nindent 10 }}
        securityContext:
          runAsUser: 0
          runAsNonRoot: false
          privileged: false
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/nri-podlevel, readOnly: true}
        - {name: nri-socket, mountPath: /var/run/nri, readOnly: true}
        - {name: sys, mountPath: /host/sys, readOnly: true, recursiveReadOnly: IfPossible}
        - {name: cgroup, mountPath: /host/cgroup}
        - {name: state, mountPath: /var/lib/nri-podlevel}
        - {name: pod-resources, mountPath: /run/nri-podlevel}
      volumes:
      - {name: config, configMap: {name: {{ $configName }}}}
      - {name: nri-socket, hostPath: {path: /var/run/nri, type: DirectoryOrCreate}}
      - {name: sys, hostPath: {path: /sys, type: Directory}}
      - {name: cgroup, hostPath: {path: /sys/fs/cgroup, type: Directory}}
      - {name: state, hostPath: {path: /var/lib/nri-podlevel, type: DirectoryOrCreate}}
      - {name: pod-resources, hostPath: {path: /run/nri-podlevel, type: DirectoryOrCreate}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $configName }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $objectLabels | nindent 4 }}
data:
  config.yaml: |
    {{- toYaml .config | nindent 4 }}
{{- end }}
