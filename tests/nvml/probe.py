#!/usr/bin/env python3
"""Ask an NVML library (the test double, or a real one) what a GPU client would, print JSON.

    python3 tests/nvml/probe.py /path/to/libnvidia-ml.so.1

The library reads its data file from KUBEGPU_NVML_DATA. Output: the return code of every call
by name (NVML_SUCCESS is 0) and the values of those that succeeded. Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import sys

NVML_SUCCESS = 0
BUFFER = 96


class PciInfo(ctypes.Structure):
    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Attributes(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint)
        for name in (
            "multiprocessorCount",
            "sharedCopyEngineCount",
            "sharedDecoderCount",
            "sharedEncoderCount",
            "sharedJpegCount",
            "sharedOfaCount",
            "gpuInstanceSliceCount",
            "computeInstanceSliceCount",
        )
    ] + [("memorySizeMB", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def probe(path: str) -> dict[str, object]:
    nvml = ctypes.CDLL(path)
    nvml.nvmlErrorString.restype = ctypes.c_char_p
    result: dict[str, object] = {"rc": {}}
    rc: dict[str, int] = result["rc"]  # type: ignore[assignment]

    def call(name: str, *args: object) -> bool:
        rc[name] = getattr(nvml, name)(*args)
        return rc[name] == NVML_SUCCESS

    if not call("nvmlInit_v2"):
        return result
    text = ctypes.create_string_buffer(BUFFER)
    if call("nvmlSystemGetDriverVersion", text, BUFFER):
        result["driver_version"] = text.value.decode()
    rc["nvmlSystemGetDriverVersion(short buffer)"] = nvml.nvmlSystemGetDriverVersion(text, 4)
    number = ctypes.c_int()
    if call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(number)):
        result["cuda_driver_version"] = number.value
    call("nvmlSystemGetNVMLVersion", text, BUFFER)
    count = ctypes.c_uint()
    devices: list[dict[str, object]] = []
    result["devices"] = devices
    if not call("nvmlDeviceGetCount_v2", ctypes.byref(count)):
        return result
    result["count"] = count.value
    for index in range(count.value):
        device: dict[str, object] = {}
        devices.append(device)
        handle = ctypes.c_void_p()
        if not call("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(handle)):
            continue
        for name, field in (("nvmlDeviceGetName", "name"), ("nvmlDeviceGetUUID", "uuid")):
            if call(name, handle, text, BUFFER):
                device[field] = text.value.decode()
        same = ctypes.c_void_p()
        if call("nvmlDeviceGetHandleByUUID", device.get("uuid", "").encode(), ctypes.byref(same)):  # type: ignore[union-attr]
            device["handle_by_uuid_matches"] = same.value == handle.value
        unsigned = ctypes.c_uint()
        for name, field in (
            ("nvmlDeviceGetIndex", "index"),
            ("nvmlDeviceGetMinorNumber", "minor_number"),
            ("nvmlDeviceGetBrand", "brand"),
            ("nvmlDeviceGetArchitecture", "architecture"),
            ("nvmlDeviceGetVirtualizationMode", "virtualization_mode"),
        ):
            if call(name, handle, ctypes.byref(unsigned)):
                device[field] = unsigned.value
        major, minor = ctypes.c_int(), ctypes.c_int()
        if call(
            "nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor)
        ):
            device["compute_capability"] = [major.value, minor.value]
        pci = PciInfo()
        if call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(pci)):
            device["pci_bus_id"] = pci.busId.decode()
            device["pci_device_id"] = pci.pciDeviceId
            device["pci_subsystem_id"] = pci.pciSubSystemId
            by_bus = ctypes.c_void_p()
            if call("nvmlDeviceGetHandleByPciBusId_v2", pci.busId, ctypes.byref(by_bus)):
                device["handle_by_pci_matches"] = by_bus.value == handle.value
        memory = Memory()
        if call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory)):
            device["memory"] = {"total": memory.total, "free": memory.free, "used": memory.used}
        memory2 = MemoryV2(version=2)
        if call("nvmlDeviceGetMemoryInfo_v2", handle, ctypes.byref(memory2)):
            device["memory_v2"] = {
                "total": memory2.total,
                "reserved": memory2.reserved,
                "free": memory2.free,
                "used": memory2.used,
            }
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        if call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending)):
            device["mig_mode"] = [current.value, pending.value]
        if device.get("mig_mode") == [1, 1]:
            device["migs"] = probe_migs(nvml, handle, rc)
        events = ctypes.c_ulonglong()
        if call("nvmlDeviceGetSupportedEventTypes", handle, ctypes.byref(events)):
            device["supported_events"] = events.value
    event_set = ctypes.c_void_p()
    if call("nvmlEventSetCreate", ctypes.byref(event_set)):
        data = ctypes.create_string_buffer(64)
        call("nvmlEventSetWait_v2", event_set, data, 10)
        call("nvmlEventSetFree", event_set)
    call("nvmlShutdown")
    result["errors"] = {code: nvml.nvmlErrorString(code).decode() for code in (0, 3, 9, 10)}
    return result


def probe_migs(nvml: ctypes.CDLL, handle: ctypes.c_void_p, rc: dict[str, int]) -> list[object]:
    """The MIG devices of a GPU in MIG mode: ids, attributes, parent, GPU instance profile."""
    migs: list[object] = []
    maximum = ctypes.c_uint()
    rc["nvmlDeviceGetMaxMigDeviceCount"] = nvml.nvmlDeviceGetMaxMigDeviceCount(
        handle, ctypes.byref(maximum)
    )
    for index in range(maximum.value):
        mig = ctypes.c_void_p()
        code = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index, ctypes.byref(mig))
        if code != NVML_SUCCESS:
            rc[f"nvmlDeviceGetMigDeviceHandleByIndex({index})"] = code
            continue
        found: dict[str, object] = {}
        migs.append(found)
        value, parent = ctypes.c_uint(), ctypes.c_void_p()
        for name, field in (
            ("nvmlDeviceIsMigDeviceHandle", "is_mig"),
            ("nvmlDeviceGetGpuInstanceId", "gpu_instance_id"),
            ("nvmlDeviceGetComputeInstanceId", "compute_instance_id"),
        ):
            if getattr(nvml, name)(mig, ctypes.byref(value)) == NVML_SUCCESS:
                found[field] = value.value
        if nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, ctypes.byref(parent)) == 0:
            found["parent_matches"] = parent.value == handle.value
        attributes = Attributes()
        if nvml.nvmlDeviceGetAttributes_v2(mig, ctypes.byref(attributes)) == NVML_SUCCESS:
            found["attributes"] = {k: getattr(attributes, k) for k, _ in Attributes._fields_}
        text = ctypes.create_string_buffer(BUFFER)
        found["uuid_rc"] = nvml.nvmlDeviceGetUUID(mig, text, BUFFER)
    return migs


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1]), indent=1, sort_keys=True))
