// The test precompiled header of cmake/EcpsPch.cmake needs a program to hang on.
int main() { return 0; }
