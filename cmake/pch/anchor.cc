// The precompiled headers of cmake/EcpsPch.cmake need a file to hang on.
