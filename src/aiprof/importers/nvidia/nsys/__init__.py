"""Nsight Systems SQLite exports (``nsys export --type sqlite``), any export schema version.

The schema drifts between Nsight Systems releases (tables renamed, columns added), so
nothing here assumes a layout: tables and columns are looked up in ``sqlite_master``
and ``PRAGMA table_info``, and the ``-- REFERENCES StringIds(id)`` / ``ENUM_*``
annotations that the exporter writes into each ``CREATE TABLE`` are used to turn ids
into text. A ``.nsys-rep`` report is first converted with ``nsys export`` when nsys is
on PATH.

Mapping (every source column without a typed home goes into ``args`` as JSON):

=====================================  ===============================================
CUPTI_ACTIVITY_KIND_KERNEL             kernel (``collective`` for NCCL kernels);
                                       grid/block "[x,y,z]"; device = deviceId;
                                       tid = streamId; registers, shared memory in args
CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET   memcpy / memset with bytes; direction and host
                                       memory kind (pageable/pinned/managed) in args
CUPTI_ACTIVITY_KIND_RUNTIME / _DRIVER  runtime or driver (by eventClass); correlation
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION    sync, on the device stream it waited for
NVTX_EVENTS                            ranges -> user_annotation (step when named like
                                       a step), marks -> instant
OSRT_API                               other with cat "osrt" (OS calls: poll, ioctl,
                                       sem_wait... are not CUDA runtime); the OSRT
                                       start/finish marks -> instant
GPU_METRICS                            the counters table
TARGET_INFO_GPU / _CUDA_DEVICE         profile.json devices
PROCESSES / ThreadNames                the tracks table
=====================================  ===============================================

IDs: PID = (globalPid >> 24) & 0xFFFFFF, TID = globalTid & 0xFFFFFF. Times are integer
ns from the session start; with TARGET_INFO_SESSION_START_TIME they become Unix ns.

Modules: ``schema`` (the export's tables, columns and enums, and detection),
``report`` (a .nsys-rep through ``nsys export``), ``reader`` (times and batches),
``device`` (kernels, copies, memsets, syncs), ``host`` (CUDA API, OS runtime, NVTX),
``metrics`` (GPU metrics), ``importer`` (the run, devices, tracks).
"""

from .importer import IMPORTER, NAME
from .report import export_report
from .schema import NsysExport, open_export

__all__ = ["IMPORTER", "NAME", "NsysExport", "export_report", "open_export"]
