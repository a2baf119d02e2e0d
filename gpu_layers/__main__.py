from gpu_layers.cli import main

raise SystemExit(main())
