// tessera: the command-line entry point.
int main() { return 0; }
