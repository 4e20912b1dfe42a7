"""The CUDA driver's VMM structures as ctypes, for the probes in this folder
(`CUmemLocation`, `CUmemAllocationProp` with its flags, `CUmemAccessDesc`)."""

import ctypes as C


class Location(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class AllocFlags(C.Structure):
    _fields_ = [("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte), ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class Prop(C.Structure):
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", Location), ("win32", C.c_void_p), ("flags", AllocFlags)]


class Access(C.Structure):
    _fields_ = [("location", Location), ("flags", C.c_int)]
