/* A "plugin" that exports only a version anyccl does not load
 * (ncclNetPlugin_v11): the loader must name the file, the symbol it wants
 * and the one it found, and carry on with the built-in network. */
__attribute__((visibility("default"))) const int ncclNetPlugin_v11 = 11;
