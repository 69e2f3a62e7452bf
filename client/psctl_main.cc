int main() { return 0; }  // placeholder, replaced in this session
