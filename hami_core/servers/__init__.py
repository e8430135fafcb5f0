"""The network edges and server processes of hami: the only package that imports flask,
grpc, waitress, cheroot and prometheus_client (an import-linter contract).

- the kube-scheduler extender (``extender``, process ``scheduler_main``);
- the mutating webhook (``webhook``, the AdmissionReview format ``review``, certificates
  ``certs``, the HTTPS server ``https``, process ``webhook_main``);
- the device plugin's kubelet gRPC API (``deviceplugin``, the generated stubs in
  ``kubelet``, process ``deviceplugin_main``, its metrics ``deviceplugin_metrics``);
- the node monitor (``monitor``, its actions on overuse ``overuse``);
- the scheduler's metrics (``metrics``) and every ``/metrics`` port (``metrics_http``);
- the settings of the four processes, each stated once (``options``).

Each edge translates the wire to a domain call (``hami_core.scheduling``,
``hami_core.webhook``, ``hami_core.deviceplugin``, ``hami_core.monitor``) and back.
"""
